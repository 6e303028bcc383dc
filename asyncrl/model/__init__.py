"""The actor-critic: normalizers, encoders, recurrent core, heads, action distributions."""
