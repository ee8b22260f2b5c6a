"""What each public method means, engine-agnostic: a plan per method (operations) and
the kinds of plan (kinds), over the SQL of a2sql.sql and the seam of a2sql.backends."""
