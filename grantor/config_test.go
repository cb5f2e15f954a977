package grantor_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// The durations a lease may have and the grantor margin have one source,
// the store: Config holds no copy of them, and the service enforces what
// the store it is given was opened with.
func TestServicePolicyIsTheStores(t *testing.T) {
	for _, f := range reflect.VisibleFields(reflect.TypeFor[grantor.Config]()) {
		if f.Type == reflect.TypeFor[time.Duration]() && f.Name != "DefaultDuration" {
			t.Errorf("Config.%s: a duration the store's options also set could disagree with them", f.Name)
		}
	}

	f := startStore(t, []kvlease.Option{kvlease.WithDurationRange(2*time.Second, 30*time.Second), kvlease.WithGrantorMargin(0)},
		grantor.DefaultConfig())
	ctx := t.Context()
	for _, d := range []time.Duration{time.Second, 31 * time.Second} {
		if _, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "a", Holder: "h", Duration: d}); !errors.Is(err, kvlease.ErrDurationOutOfRange) {
			t.Errorf("grant of %v on a store for [2s, 30s]: %v, want ErrDurationOutOfRange", d, err)
		}
	}
	if _, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "a", Holder: "h", Duration: 2 * time.Second}); err != nil {
		t.Fatalf("grant of 2s on a store for [2s, 30s]: %v", err)
	}
	if rec, err := f.store.Get(ctx, "a"); err != nil || rec.TTL != 2*time.Second {
		t.Fatalf("stored %+v, %v; want TTL 2s (the store's margin 0)", rec, err)
	}
}

// New refuses a config that does not suit its store: a default duration
// outside the store's range would fail every grant that names none.
func TestNewRefusesConfigTheStoreCannotServe(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	nc := kvleasetest.Connect(t, srv.ClientURL())
	st := kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithDurationRange(time.Second, 5*time.Second))
	if svc, err := grantor.New(st, nc, grantor.DefaultConfig()); !errors.Is(err, grantor.ErrConfig) || svc != nil {
		t.Fatalf("New with default 10s on a store for [1s, 5s]: %v (service %t); want ErrConfig and none", err, svc != nil)
	}
	cfg := grantor.DefaultConfig()
	cfg.DefaultDuration = 5 * time.Second
	svc, err := grantor.New(st, nc, cfg)
	if err != nil || svc == nil {
		t.Fatalf("New with default 5s on a store for [1s, 5s]: %v", err)
	}
	if svc, err := grantor.New(nil, nc, grantor.DefaultConfig()); !errors.Is(err, grantor.ErrConfig) || svc != nil {
		t.Fatalf("New without a store: %v (service %t); want ErrConfig and none", err, svc != nil)
	}
}

func TestConfigValidateFor(t *testing.T) {
	for _, c := range []struct {
		name       string
		def        time.Duration
		minD, maxD time.Duration
		ok         bool
	}{
		{"inside", 10 * time.Second, time.Second, time.Hour, true},
		{"at min", 10 * time.Second, 10 * time.Second, time.Hour, true},
		{"at max", 10 * time.Second, time.Second, 10 * time.Second, true},
		{"below min", 10 * time.Second, 20 * time.Second, time.Hour, false},
		{"above max", 10 * time.Second, time.Second, 5 * time.Second, false},
		{"below the floor", 500 * time.Millisecond, 0, time.Hour, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := grantor.DefaultConfig()
			cfg.DefaultDuration = c.def
			err := cfg.ValidateFor(c.minD, c.maxD)
			if c.ok && err != nil || !c.ok && !errors.Is(err, grantor.ErrConfig) {
				t.Fatalf("ValidateFor(%v, %v) with default %v: %v", c.minD, c.maxD, c.def, err)
			}
		})
	}
	// ValidateFor includes Validate.
	cfg := grantor.DefaultConfig()
	cfg.MaxInFlight = 0
	if err := cfg.ValidateFor(time.Second, time.Hour); !errors.Is(err, grantor.ErrConfig) {
		t.Fatalf("ValidateFor with no in-flight: %v, want ErrConfig", err)
	}
}
