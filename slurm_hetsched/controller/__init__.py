"""The controller: the round tick shared with the simulator, and (later) the live service."""
