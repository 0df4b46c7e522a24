"""What each command does, as functions over a Store that return plain data."""
