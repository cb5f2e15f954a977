package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leased/leased/grantor/client"
)

// Options refuse values they cannot use, and New returns their error
// instead of panicking or keeping a default.
func TestOptionsRefuseBadValues(t *testing.T) {
	nc := &nats.Conn{} // New does not use the connection
	for name, opt := range map[string]client.Option{
		"nil option":          nil,
		"nil tracer provider": client.WithTracerProvider(nil),
		"nil meter provider":  client.WithMeterProvider(nil),
		"zero timeout":        client.WithTimeout(0),
		"negative timeout":    client.WithTimeout(-time.Second),
	} {
		t.Run(name, func(t *testing.T) {
			if c, err := client.New(nc, opt); !errors.Is(err, client.ErrOption) || c != nil {
				t.Fatalf("New = %v, %v; want ErrOption", c, err)
			}
		})
	}
	if _, err := client.New(nil); !errors.Is(err, client.ErrOption) {
		t.Fatalf("New(nil) = %v, want ErrOption", err)
	}
	if _, err := client.New(nc, client.WithTimeout(time.Second)); err != nil {
		t.Fatal(err)
	}
}
