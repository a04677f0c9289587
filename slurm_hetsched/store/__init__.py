"""Where the round state is kept: in memory (simulation), SQLite (the live controller)."""
