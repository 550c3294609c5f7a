"""Readers: the one place where sources meet parsers; each returns parsed values and reports
unreadable or malformed input to an ErrorReporter."""
