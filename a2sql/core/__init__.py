"""What the store means, whatever the engine: the records, the errors, the clock, the
checks of every argument and one plan per public operation."""
