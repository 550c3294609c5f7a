"""Sources: read bytes from a root and classify OS errors; no parsing here."""
