"""Long runs, and what runs leave behind."""
