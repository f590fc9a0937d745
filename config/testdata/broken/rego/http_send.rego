package spanwatch

alerts contains {"labels": {"alertname": "X"}} if http.send({"url": "http://x", "method": "GET"}).status_code == 200
