"""What is sent, shared by every backend: the tables and the queries of each operation."""
