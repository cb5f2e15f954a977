package faultcheck_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/cmd/leased/internal/faultcheck"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease"
)

// The checker's window is the holder's: kvlease's arithmetic, which it
// restates so as not to link NATS.
func TestWindowIsKvleases(t *testing.T) {
	for _, d := range []time.Duration{time.Second, 3 * time.Second, 7*time.Second + 3, time.Minute, time.Hour} {
		for _, rho := range []float64{0, kvlease.DefaultClockRate, 0.05} {
			m := kvlease.DefaultHolderMargin(d)
			if got := faultcheck.DefaultHolderMargin(d); got != m {
				t.Errorf("DefaultHolderMargin(%v) = %v, kvlease's %v", d, got, m)
			}
			for _, mg := range []time.Duration{0, 300 * time.Millisecond, kvlease.DefaultGrantorMargin} {
				if got, want := faultcheck.ServerTTL(d, mg), kvlease.ServerTTL(d, mg); got != want {
					t.Errorf("ServerTTL(%v, %v) = %v, kvlease's %v", d, mg, got, want)
				}
				if got, want := faultcheck.RenewalCutoff(d, mg), kvlease.RenewalCutoff(d, mg); got != want {
					t.Errorf("RenewalCutoff(%v, %v) = %v, kvlease's %v", d, mg, got, want)
				}
			}
			if got, want := faultcheck.Window(d, rho, m), kvlease.HolderValidity(d, rho, m); got != want {
				t.Errorf("Window(%v, %v, %v) = %v, kvlease's %v", d, rho, m, got, want)
			}
		}
	}
	if p := faultcheck.DefaultParams(); p.Rho != kvlease.DefaultClockRate || p.GrantorMargin != kvlease.DefaultGrantorMargin {
		t.Errorf("default rho %v and grantor margin %v, kvlease's %v and %v", p.Rho, p.GrantorMargin,
			kvlease.DefaultClockRate, kvlease.DefaultGrantorMargin)
	}
}

// The window arithmetic the made-up histories rely on (docs/safety.md).
func TestWindow(t *testing.T) {
	for _, tc := range []struct {
		d, m time.Duration
		rho  float64
		want time.Duration
	}{
		{3 * time.Second, 300 * time.Millisecond, 1e-3, 2697 * time.Millisecond},
		{time.Second, 100 * time.Millisecond, 1e-3, 899 * time.Millisecond},
		{time.Minute, 2 * time.Second, 0, 58 * time.Second},
	} {
		if got := faultcheck.Window(tc.d, tc.rho, tc.m); got != tc.want {
			t.Errorf("Window(%v, %v, %v) = %v, want %v", tc.d, tc.rho, tc.m, got, tc.want)
		}
	}
}

// The outcome codes are the service's.
func TestCodesAreTheServices(t *testing.T) {
	for mine, theirs := range map[string]string{
		faultcheck.CodeHeld: api.CodeHeld, faultcheck.CodeNotHolder: api.CodeNotHolder, faultcheck.CodeConflict: api.CodeConflict,
		faultcheck.CodeExpired: api.CodeExpired, faultcheck.CodeNotFound: api.CodeNotFound,
		faultcheck.CodeUnavailable: api.CodeUnavailable, faultcheck.CodeInternal: api.CodeInternal,
	} {
		if mine != theirs {
			t.Errorf("code %q, the service's %q", mine, theirs)
		}
	}
}

// The checker is pure: it links neither NATS nor any package of ours.
func TestLinksNoNATS(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/leased/leased/cmd/leased/internal/faultcheck").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for dep := range strings.Lines(string(out)) {
		dep = strings.TrimSpace(dep)
		if strings.Contains(dep, "nats") || (strings.HasPrefix(dep, "github.com/leased/leased/") && !strings.HasSuffix(dep, "/faultcheck")) {
			t.Errorf("faultcheck links %s", dep)
		}
	}
}
