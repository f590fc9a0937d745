package agent

import "time"

// The listener's fixed limits; its settings (listener:) are package
// config's.
const (
	// StallTimeout cuts off a response whose client has accepted no bytes
	// for this long: a slow reader holds a response's memory for at most
	// this, not for the whole write timeout.
	StallTimeout = 10 * time.Second
	// ReadHeaderTimeout, ReadTimeout and IdleTimeout bound a request's
	// headers (and the TLS handshake), the whole request, and a kept-alive
	// connection's wait for its next request.
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 10 * time.Second
	IdleTimeout       = time.Minute
	// MaxHeaderBytes bounds a request's headers (net/http's default is
	// 1 MB).
	MaxHeaderBytes = 16 << 10
	// MaxConnections bounds the open connections; more wait in the
	// kernel's accept queue, costing the agent nothing.
	MaxConnections = 64
)
