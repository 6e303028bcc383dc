"""The run's configuration: one typed Config, its flags, its checks."""
