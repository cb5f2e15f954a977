package kvlease_test

import (
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
)

var update = flag.Bool("update", false, "rewrite golden files")

// Two documented scenarios (docs/advise.md), checked against golden files.
func TestAdviseScenarios(t *testing.T) {
	for _, c := range []struct {
		name string
		m    kvlease.Measurements
	}{
		// A batch job scheduler on a LAN: quick renewals, modest GC pauses.
		{"lan-scheduler", kvlease.Measurements{Work: 2 * time.Second, RenewRTT: 3 * time.Millisecond,
			Pause: 40 * time.Millisecond, ClockRate: 2e-5}},
		// A JVM-like worker across regions: slow round trips, long pauses,
		// long work units, clocks unmeasured.
		{"wan-worker", kvlease.Measurements{Work: 45 * time.Second, RenewRTT: 180 * time.Millisecond,
			Pause: 1500 * time.Millisecond}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := kvlease.Advise(c.m)
			if err := kvlease.ValidateTiming(a.Duration, a.HolderMargin, a.RenewInterval, a.ClockRate); err != nil {
				t.Fatalf("advice does not validate: %v\n%s", err, a)
			}
			if a.RenewInterval < c.m.Pause+2*c.m.RenewRTT {
				t.Fatalf("renew interval %v does not absorb a pause and two round trips", a.RenewInterval)
			}
			golden := filepath.Join("testdata", "advise-"+c.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(a.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got := a.String(); got != string(want) {
				t.Fatalf("advice:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// After collections, the process's own GC pause p99 is a positive figure,
// ready for Measurements.Pause.
func TestGCPauseP99(t *testing.T) {
	for range 3 {
		runtime.GC()
	}
	p99, ok := kvlease.GCPauseP99()
	if !ok || p99 <= 0 || p99 > time.Second {
		t.Fatalf("GCPauseP99() = %v, %v; want a positive pause under a second", p99, ok)
	}
}

// A clock slow against the grantor's (a negative rate error) is advised
// for as one fast by as much: -0.5 read as unmeasured (found by an outside
// client).
func TestAdviseNegativeClockRate(t *testing.T) {
	m := kvlease.Measurements{RenewRTT: 3 * time.Millisecond, Pause: 40 * time.Millisecond}
	m.ClockRate = 2e-4
	fast := kvlease.Advise(m)
	m.ClockRate = -2e-4
	if slow := kvlease.Advise(m); slow.ClockRate != fast.ClockRate || slow.ClockRate == kvlease.DefaultClockRate {
		t.Errorf("ρ for a clock-rate error of -2e-4: %g, want %g as for +2e-4", slow.ClockRate, fast.ClockRate)
	}
}

// A clock-rate error measured small (1e-6, an NTP-disciplined clock's)
// gets ρ's floor, and the reason says so: it said "ρ 0.0001: ten times
// the measured clock-rate error 1e-06" (found by an outside client).
func TestAdviseClockRateFloor(t *testing.T) {
	a := kvlease.Advise(kvlease.Measurements{RenewRTT: 3 * time.Millisecond, Pause: 40 * time.Millisecond, ClockRate: 1e-6})
	if a.ClockRate != 1e-4 {
		t.Fatalf("ρ for a clock-rate error of 1e-6: %g, want the floor 1e-4", a.ClockRate)
	}
	for _, r := range a.Reasons {
		if strings.HasPrefix(r, "ρ ") && !strings.HasPrefix(r, "ρ 0.0001: the floor") {
			t.Errorf("reason %q: want the floor said, not ten times the measurement", r)
		}
	}
}
