"""The plumbing every role shares: messages, queues, shared memory, processes, checkpoints."""
