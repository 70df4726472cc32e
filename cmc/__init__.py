"""cmc package."""
