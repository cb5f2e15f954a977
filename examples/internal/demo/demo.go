// Package demo holds what the example programs share that is not what
// they show: a NATS server to run against.
package demo

import (
	"os"

	"github.com/leased/leased/grantor/embedded"
)

// WithServer calls fn with natsURL or, if that is empty, with the URL of
// an embedded JetStream server in a temporary directory, which is removed
// when fn returns.
func WithServer(natsURL string, fn func(natsURL string) error) error {
	if natsURL != "" {
		return fn(natsURL)
	}
	dir, err := os.MkdirTemp("", "leased-example-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Config{DataDir: dir})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	return fn(srv.ClientURL())
}
