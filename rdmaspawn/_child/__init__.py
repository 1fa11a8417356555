"""What the child does between clone and exec, declared instead of run as Python."""
