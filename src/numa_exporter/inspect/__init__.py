"""``numa-exporter inspect PID``: a pure diagnosis (diagnosis.py) and the command (command.py)."""
