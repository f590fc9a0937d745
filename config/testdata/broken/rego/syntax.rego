package spanwatch

alerts contains {"labels": {"alertname": "X"} if {
