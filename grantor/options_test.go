package grantor_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/micro"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
)

// Options refuse values they cannot use: New returns ErrConfig, never
// panics.
func TestOptionsRefuseBadValues(t *testing.T) {
	for name, opt := range map[string]grantor.Option{
		"nil option":           nil,
		"nil tracer provider":  grantor.WithTracerProvider(nil),
		"nil meter provider":   grantor.WithMeterProvider(nil),
		"nil logger":           grantor.WithLogger(nil),
		"nil extension":        grantor.WithExtension(nil),
		"negative flap window": grantor.WithFlapping(-1, 3),
	} {
		t.Run(name, func(t *testing.T) {
			if svc, err := grantor.New(nil, nil, grantor.DefaultConfig(), opt); !errors.Is(err, grantor.ErrConfig) || svc != nil {
				t.Fatalf("New = %v, %v; want ErrConfig", svc, err)
			}
		})
	}
}

// The wire package spells out micro's error headers so that clients need not
// link micro; they must stay the same.
func TestErrorHeadersAreMicros(t *testing.T) {
	if api.HeaderErrorCode != micro.ErrorCodeHeader || api.HeaderError != micro.ErrorHeader {
		t.Fatalf("api headers %q, %q; micro's %q, %q", api.HeaderErrorCode, api.HeaderError, micro.ErrorCodeHeader, micro.ErrorHeader)
	}
}
