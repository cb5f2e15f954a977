package kvlease_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
)

func TestTimingServerTTL(t *testing.T) {
	tests := []struct {
		name    string
		d, m    time.Duration
		wantTTL time.Duration
	}{
		{"fraction rounds up", 1500 * time.Millisecond, 200 * time.Millisecond, 2 * time.Second},
		{"whole second no margin", time.Second, 0, time.Second},
		{"one nanosecond over rounds up", time.Second, time.Nanosecond, 2 * time.Second},
		{"whole seconds add", 10 * time.Second, time.Second, 11 * time.Second},
		{"default margin", 3 * time.Second, kvlease.DefaultGrantorMargin, 4 * time.Second},
		{"just under a second", 999 * time.Millisecond, 0, time.Second},
		{"1.9s never truncated to 1s", 1900 * time.Millisecond, 0, 2 * time.Second},
		{"fractions sum to whole", 1500 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second},
		{"an hour", time.Hour, time.Second, time.Hour + time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := kvlease.ServerTTL(tt.d, tt.m)
			if got != tt.wantTTL {
				t.Fatalf("ServerTTL(%v, %v) = %v, want %v", tt.d, tt.m, got, tt.wantTTL)
			}
			// Properties the grantor relies on: whole seconds, never less
			// than d+m, and less than a second more.
			if got%time.Second != 0 {
				t.Errorf("ServerTTL(%v, %v) = %v is not whole seconds", tt.d, tt.m, got)
			}
			if got < tt.d+tt.m || got-(tt.d+tt.m) >= time.Second {
				t.Errorf("ServerTTL(%v, %v) = %v not in [d+m, d+m+1s)", tt.d, tt.m, got)
			}
		})
	}
}

func TestTimingRenewalCutoff(t *testing.T) {
	for _, tt := range []struct {
		d, m, want time.Duration
	}{
		// TTL 4 s: less 4 ms (ρ) and the 100 ms guard.
		{3 * time.Second, kvlease.DefaultGrantorMargin, 3896 * time.Millisecond},
		// TTL 1 s: 1 ms and 100 ms.
		{time.Second, 0, 899 * time.Millisecond},
		// TTL 1 h 1 s: 3.601 s and 100 ms.
		{time.Hour, kvlease.DefaultGrantorMargin, time.Hour + time.Second - 3601*time.Millisecond - 100*time.Millisecond},
	} {
		if got := kvlease.RenewalCutoff(tt.d, tt.m); got != tt.want {
			t.Errorf("RenewalCutoff(%v, %v) = %v, want %v", tt.d, tt.m, got, tt.want)
		}
	}
	// A holder keeping its deadline (the default margins) always stops
	// before the grantor does.
	for _, d := range []time.Duration{time.Second, 3 * time.Second, 10 * time.Second, time.Minute, time.Hour} {
		v := kvlease.HolderValidity(d, kvlease.DefaultClockRate, kvlease.DefaultHolderMargin(d))
		if c := kvlease.RenewalCutoff(d, kvlease.DefaultGrantorMargin); v >= c {
			t.Errorf("D %v: holder validity %v not before the renewal cutoff %v", d, v, c)
		}
	}
}

func TestTimingHolderValidity(t *testing.T) {
	tests := []struct {
		name   string
		d      time.Duration
		rho    float64
		margin time.Duration
		want   time.Duration
	}{
		{"no drift no margin", 10 * time.Second, 0, 0, 10 * time.Second},
		{"margin only", 10 * time.Second, 0, time.Second, 9 * time.Second},
		{"default rho", 10 * time.Second, 1e-3, 0, 9990 * time.Millisecond},
		{"default rho and margin", 10 * time.Second, 1e-3, time.Second, 8990 * time.Millisecond},
		{"one second lease", time.Second, 1e-3, 100 * time.Millisecond, 899 * time.Millisecond},
		{"three second lease", 3 * time.Second, 1e-3, 300 * time.Millisecond, 2697 * time.Millisecond},
		{"margin equals drifted duration", time.Second, 0, time.Second, 0},
		{"margin beyond duration", time.Second, 0, 2 * time.Second, -time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := kvlease.HolderValidity(tt.d, tt.rho, tt.margin)
			// Float arithmetic may lose a nanosecond; it must never gain one
			// (a longer validity would be unsafe).
			if got > tt.want || got < tt.want-time.Nanosecond {
				t.Fatalf("HolderValidity(%v, %g, %v) = %v, want %v", tt.d, tt.rho, tt.margin, got, tt.want)
			}
		})
	}
}

func TestTimingDefaultHolderMargin(t *testing.T) {
	tests := []struct {
		name string
		d    time.Duration
		want time.Duration
	}{
		{"clamped up below 1s", 500 * time.Millisecond, 100 * time.Millisecond},
		{"clamped up at 1s", time.Second, 100 * time.Millisecond},
		{"tenth at 1.5s", 1500 * time.Millisecond, 150 * time.Millisecond},
		{"tenth at 10s", 10 * time.Second, time.Second},
		{"tenth at the upper clamp", 20 * time.Second, 2 * time.Second},
		{"clamped down at 30s", 30 * time.Second, 2 * time.Second},
		{"clamped down at 1h", time.Hour, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := kvlease.DefaultHolderMargin(tt.d); got != tt.want {
				t.Fatalf("DefaultHolderMargin(%v) = %v, want %v", tt.d, got, tt.want)
			}
		})
	}
}

func TestTimingDefaultRenewInterval(t *testing.T) {
	for _, tt := range []struct {
		name string
		d    time.Duration
		want time.Duration
	}{
		{"3s", 3 * time.Second, time.Second},
		{"1.5s", 1500 * time.Millisecond, 500 * time.Millisecond},
		{"1h", time.Hour, 20 * time.Minute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := kvlease.DefaultRenewInterval(tt.d); got != tt.want {
				t.Fatalf("DefaultRenewInterval(%v) = %v, want %v", tt.d, got, tt.want)
			}
		})
	}
}

func TestValidateWindow(t *testing.T) {
	tests := []struct {
		name    string
		d       time.Duration
		margin  time.Duration
		rho     float64
		wantErr bool
	}{
		{"defaults 1s", time.Second, kvlease.DefaultHolderMargin(time.Second), kvlease.DefaultClockRate, false},
		{"zero margin zero rho", time.Second, 0, 0, false},
		{"one nanosecond left", time.Second, time.Second - time.Nanosecond, 0, false},
		{"negative margin", 10 * time.Second, -time.Millisecond, kvlease.DefaultClockRate, true},
		{"margin equals window", time.Second, time.Second, 0, true},
		{"margin equals drifted window", 10 * time.Second, 9990 * time.Millisecond, 1e-3, true},
		{"margin beyond window", time.Second, 5 * time.Second, kvlease.DefaultClockRate, true},
		{"negative rho", 10 * time.Second, time.Second, -1e-3, true},
		{"rho at upper bound", 10 * time.Second, time.Second, 0.1, true},
		{"rho far too large", 10 * time.Second, time.Second, 2, true},
		{"rho just under bound", 10 * time.Second, time.Second, 0.0999, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := kvlease.ValidateWindow(tt.d, tt.margin, tt.rho)
			checkTimingErr(t, err, tt.wantErr)
		})
	}
	t.Run("rho NaN", func(t *testing.T) {
		// NaN passes the range check (every comparison with it is false),
		// and on amd64 time.Duration(NaN) is MinInt64, which minus the margin
		// wraps to a validity of ~292 years.
		checkTimingErr(t, kvlease.ValidateWindow(10*time.Second, time.Second, math.NaN()), true)
	})
}

func TestValidateTiming(t *testing.T) {
	const rho = kvlease.DefaultClockRate
	d := 3 * time.Second
	m := 300 * time.Millisecond
	w := kvlease.HolderValidity(d, rho, m) // 2.697s
	tests := []struct {
		name     string
		d        time.Duration
		margin   time.Duration
		interval time.Duration
		rho      float64
		wantErr  bool
	}{
		{"negative margin", d, -time.Nanosecond, time.Second, rho, true},
		{"margin equals window", d, d, time.Second, 0, true},
		{"margin beyond window", d, 2 * d, time.Second, rho, true},
		{"rho negative", d, m, time.Second, -0.5, true},
		{"rho too large", d, m, time.Second, 0.5, true},
		{"interval zero", d, m, 0, rho, true},
		{"interval negative", d, m, -time.Second, rho, true},
		{"interval above half window", d, m, w/2 + time.Nanosecond, rho, true},
		{"interval equals window", d, m, w, rho, true},
		{"interval equals half window", d, m, w / 2, rho, false},
		// Below it the keeper retried in a tight loop (found by an
		// outside client).
		{"interval one nanosecond", d, m, time.Nanosecond, rho, true},
		{"interval the least", d, m, kvlease.MinRenewInterval, rho, false},
		{"interval third of d", d, m, d / 3, rho, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := kvlease.ValidateTiming(tt.d, tt.margin, tt.interval, tt.rho)
			checkTimingErr(t, err, tt.wantErr)
		})
	}
	// The defaults must always fit together.
	for _, d := range []time.Duration{time.Second, 1500 * time.Millisecond, 10 * time.Second, time.Hour} {
		t.Run("defaults "+d.String(), func(t *testing.T) {
			err := kvlease.ValidateTiming(d, kvlease.DefaultHolderMargin(d), kvlease.DefaultRenewInterval(d), kvlease.DefaultClockRate)
			if err != nil {
				t.Fatalf("ValidateTiming with defaults for %v: %v", d, err)
			}
		})
	}
}

func checkTimingErr(t *testing.T, err error, wantErr bool) {
	t.Helper()
	switch {
	case wantErr && err == nil:
		t.Fatal("got nil, want an error wrapping ErrInvalidTiming")
	case wantErr && !errors.Is(err, kvlease.ErrInvalidTiming):
		t.Fatalf("got %v, want an error wrapping ErrInvalidTiming", err)
	case !wantErr && err != nil:
		t.Fatalf("got %v, want nil", err)
	}
}

func TestValidateName(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr bool
	}{
		{"empty", "", true},
		{"too long", strings.Repeat("a", kvlease.MaxNameLen+1), true},
		{"longest", strings.Repeat("a", kvlease.MaxNameLen), false},
		{"leading dot", ".a", true},
		{"trailing dot", "a.", true},
		{"lone dot", ".", true},
		{"empty token", "a..b", true},
		{"star wildcard", "a*", true},
		{"tail wildcard", "a>", true},
		{"space", "a b", true},
		{"non-UTF8", "a\xffb", true},
		{"NUL", "a\x00b", true},
		{"tab", "a\tb", true},
		{"newline", "a\nb", true},
		{"DEL", "a\x7fb", true},
		{"non-ASCII letter", "caf\u00e9", true},
		{"dollar", "$KV", true},
		{"slash and dash", "svc/web-1", false},
		{"dotted tokens", "a.b.c", false},
		{"equals and underscore", "x=y_z", false},
		{"single char", "a", false},
		{"digits and upper case", "Job/42", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := kvlease.ValidateName(tt.in)
			switch {
			case tt.wantErr && !errors.Is(err, kvlease.ErrInvalidName):
				t.Fatalf("ValidateName(%q) = %v, want ErrInvalidName", tt.in, err)
			case !tt.wantErr && err != nil:
				t.Fatalf("ValidateName(%q) = %v, want nil", tt.in, err)
			}
		})
	}
}

func TestValidateHolder(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr bool
	}{
		{"empty", "", true},
		{"too long", strings.Repeat("h", kvlease.MaxHolderLen+1), true},
		{"too long in runes", strings.Repeat("\u00e9", kvlease.MaxHolderLen/2+1), true},
		{"longest", strings.Repeat("h", kvlease.MaxHolderLen), false},
		{"non-UTF8", "a\xffb", true},
		{"truncated UTF-8", "\xc3", true},
		{"NUL", "a\x00b", true},
		{"tab", "a\tb", true},
		{"newline", "host\n", true},
		{"escape", "\x1b[31m", true},
		{"DEL", "a\x7fb", true},
		{"C1 control", "a\u0085b", true},
		{"zero-width space", "a\u200bb", true},
		{"replacement character", "a\ufffdb", true}, // what JSON made of "\xff" and "\ud800"
		{"spaces only", "  ", true},
		{"leading space", " a", true},
		{"trailing space", "a ", true},
		{"trailing no-break space", "a\u00a0", true},
		// A holder is printable text, not a NATS key: these are fine.
		{"space", "a b", false},
		{"leading dot", ".a", false},
		{"trailing dot", "a.", false},
		{"double dot", "a..b", false},
		{"star", "a*", false},
		{"gt", "a>", false},
		{"slash and dash", "svc/web-1", false},
		{"dotted", "a.b.c", false},
		{"equals and underscore", "x=y_z", false},
		{"unicode letters", "n\u0153ud-\u00e9t\u00e9", false},
		{"host:pid", "web-1.example.com:4711", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := kvlease.ValidateHolder(tt.in)
			switch {
			case tt.wantErr && !errors.Is(err, kvlease.ErrInvalidHolder):
				t.Fatalf("ValidateHolder(%q) = %v, want ErrInvalidHolder", tt.in, err)
			case !tt.wantErr && err != nil:
				t.Fatalf("ValidateHolder(%q) = %v, want nil", tt.in, err)
			}
		})
	}
}
