package main

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/election"
	"github.com/leased/leased/kvlease/kvleasetest"
)

func TestRun(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	var out strings.Builder
	if err := run(ctx, &out, srv.ClientURL()); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())

	// The observer saw three distinct leaders with increasing tokens.
	re := regexp.MustCompile(`(?m)^observer: leader is (\S+) \(token (\d+)\)$`)
	var prev uint64
	seen := map[string]bool{}
	matches := re.FindAllStringSubmatch(out.String(), -1)
	for _, m := range matches {
		token, _ := strconv.ParseUint(m[2], 10, 64)
		if seen[m[1]] {
			t.Errorf("%s led twice", m[1])
		}
		seen[m[1]] = true
		if token <= prev {
			t.Errorf("leader %s has token %d, not above %d", m[1], token, prev)
		}
		prev = token
	}
	if len(matches) != 3 {
		t.Errorf("observed %d leaders, want 3", len(matches))
	}
	// Each vacancy the observer reports has the right cause: the first
	// leader resigned, the second hung and expired, the third resigned. The
	// last is always seen; the other two may not be: the bucket keeps one
	// message per lease, and the next leader's grant, milliseconds after a
	// vacancy begins, replaces its marker before an observer that lags (on a
	// loaded machine) has read it, so that observer sees the next leader
	// directly. A vacancy, when seen, must stand where it belongs.
	wantCause := []string{"released", "expired", "released"} // after the 1st, 2nd, 3rd leader
	term, last := 0, ""
	for _, line := range strings.Split(out.String(), "\n") {
		if !strings.HasPrefix(line, "observer: ") {
			continue
		}
		last = line
		switch {
		case strings.HasPrefix(line, "observer: leader is "):
			term++
		case strings.HasPrefix(line, "observer: vacant ("):
			if term < 1 || term > len(wantCause) || line != "observer: vacant ("+wantCause[term-1]+")" {
				t.Errorf("after %d leaders the observer saw %q", term, line)
			}
		}
	}
	if term != 3 || last != "observer: vacant (released)" {
		t.Errorf("the observer's last word, after %d leaders: %q; want the third leader's resignation", term, last)
	}
	for _, want := range []string{
		`(?m)^\w+: leads with token \d+, \S+ after \w+ resigned$`,
		`(?m)^\w+: leads with token \d+, \S+ after \w+ stopped renewing`,
		`(?m)^\w+: write refused by the fence: token \d+ is stale, \d+ already accepted$`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("output lacks a match for %s", want)
		}
	}

	// Every leader has left: the election is vacant.
	st := kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithBucket(leaseBucket))
	e, err := election.New(st, electionName)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := e.Leader(ctx); !errors.Is(err, kvlease.ErrNotFound) {
		t.Errorf("Leader() after the story = %+v, %v; want ErrNotFound", rec, err)
	}
}

// A run started while the lease still has a leader that an earlier run
// left (killed before it resigned) says so, before any campaign: it said
// "charlie led twice" after telling the whole story, as if the election
// had given one candidate two terms (found by an outside client).
func TestRunRefusesALeaderLeftByAnEarlierRun(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st := kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithBucket(leaseBucket), kvlease.WithGrantorMargin(0))
	left, err := kvlease.Acquire(ctx, st, electionName, candidates[2], leaseD) // never renewed nor released
	if err != nil {
		t.Fatal(err)
	}

	var out strings.Builder
	err = run(ctx, &out, srv.ClientURL())
	if !errors.Is(err, errEarlierLeader) {
		t.Fatalf("run with %s (token %d) left leading: %v, want errEarlierLeader\noutput:\n%s",
			left.Holder(), left.Token(), err, out.String())
	}
	if want := "(token " + strconv.FormatUint(uint64(left.Token()), 10) + ")"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the leader left, %s", err, want)
	}
	if strings.Contains(out.String(), "campaign for") {
		t.Errorf("the candidates campaigned beside the leader left:\n%s", out.String())
	}
}
