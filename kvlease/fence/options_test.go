package fence_test

import (
	"errors"
	"testing"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/fence"
)

// OpenKV refuses options it cannot use with kvlease.ErrInvalidOption,
// before it touches JetStream (a nil js is never used).
func TestOpenKVRejectsBadOptions(t *testing.T) {
	for name, opt := range map[string]fence.KVOption{
		"nil option":   nil,
		"no replicas":  fence.WithReplicas(0),
		"six replicas": fence.WithReplicas(6),
	} {
		t.Run(name, func(t *testing.T) {
			f, err := fence.OpenKV(t.Context(), nil, "fences", opt)
			if !errors.Is(err, kvlease.ErrInvalidOption) || f != nil {
				t.Fatalf("OpenKV = (%v, %v), want ErrInvalidOption", f, err)
			}
		})
	}
}
