"""The runwire relay."""
