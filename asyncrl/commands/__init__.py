"""The command-line tools beside train: enjoy, match, bench, tune, plot, export, push."""
