"""Models the book diagnoses: written the way people write them, not tuned."""
