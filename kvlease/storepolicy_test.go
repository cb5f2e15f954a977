package kvlease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// A Store reports the durations and margin it was opened with: a service
// on it reads them there instead of holding its own copy.
func TestStoreReportsItsPolicy(t *testing.T) {
	_, st := kvleasetest.NewStore(t, kvlease.WithDurationRange(2*time.Second, time.Minute), kvlease.WithGrantorMargin(0))
	if minD, maxD := st.DurationRange(); minD != 2*time.Second || maxD != time.Minute {
		t.Errorf("DurationRange = %v, %v; want 2s, 1m", minD, maxD)
	}
	if mg := st.GrantorMargin(); mg != 0 {
		t.Errorf("GrantorMargin = %v, want 0", mg)
	}
	_, def := kvleasetest.NewStore(t)
	if minD, maxD := def.DurationRange(); minD != kvlease.MinDuration || maxD != kvlease.DefaultMaxDuration {
		t.Errorf("default DurationRange = %v, %v; want %v, %v", minD, maxD, kvlease.MinDuration, kvlease.DefaultMaxDuration)
	}
	if mg := def.GrantorMargin(); mg != kvlease.DefaultGrantorMargin {
		t.Errorf("default GrantorMargin = %v, want %v", mg, kvlease.DefaultGrantorMargin)
	}
}

// CheckOptions refuses what Open refuses, without a server.
func TestCheckOptions(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []kvlease.Option
	}{
		{"min below 1s", []kvlease.Option{kvlease.WithDurationRange(100*time.Millisecond, time.Minute)}},
		{"max below min", []kvlease.Option{kvlease.WithDurationRange(2*time.Second, time.Second)}},
		{"negative margin", []kvlease.Option{kvlease.WithGrantorMargin(-time.Second)}},
		{"empty bucket", []kvlease.Option{kvlease.WithBucket("")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := kvlease.CheckOptions(c.opts...); !errors.Is(err, kvlease.ErrInvalidOption) {
				t.Fatalf("CheckOptions = %v, want ErrInvalidOption", err)
			}
		})
	}
	if err := kvlease.CheckOptions(kvlease.WithDurationRange(time.Second, time.Minute), kvlease.WithGrantorMargin(0)); err != nil {
		t.Fatalf("good options: %v", err)
	}
}
