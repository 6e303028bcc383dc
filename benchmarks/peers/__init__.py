"""asyncrl beside its peers (Sample Factory, CleanRL), each run on this machine."""
