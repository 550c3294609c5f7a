"""Collectors: metric families built fresh per scrape from the last Snapshot."""
