package fence_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/fence"
	"github.com/leased/leased/kvlease/kvleasetest"
)

func TestMemFenceTokens(t *testing.T) {
	var f fence.Mem // the zero value is ready
	const res = "db/accounts"
	ran := 0
	effect := func() error { ran++; return nil }

	steps := []struct {
		name    string
		token   kvlease.Token
		wantErr bool
		highest kvlease.Token
	}{
		{"first token", 5, false, 5},
		{"equal token", 5, false, 5},
		{"higher token", 7, false, 7},
		{"lower token", 6, true, 7},
		{"much lower token", 1, true, 7},
		{"equal again", 7, false, 7},
		{"jump", 1 << 40, false, 1 << 40},
	}
	rejected := int64(0)
	// Token 0 is no tenure's (revisions begin at 1): invalid, not stale,
	// and nothing runs, as fence.SQL and fence.KV answer it.
	// Nor is one above the largest bigint, which, taken, would refuse
	// every real token after it for good (found by an outside client).
	for _, tok := range []kvlease.Token{0, math.MaxInt64 + 1, math.MaxUint64} {
		if err := f.Do(res, tok, effect); !errors.Is(err, fence.ErrInvalidToken) || ran != 0 {
			t.Fatalf("Do(%d) = %v (effect ran %d times), want ErrInvalidToken, nothing run", tok, err, ran)
		}
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			before := ran
			err := f.Do(res, s.token, effect)
			if s.wantErr {
				rejected++
				var se *fence.StaleTokenError
				if !errors.As(err, &se) || !errors.Is(err, fence.ErrStaleToken) {
					t.Fatalf("Do(%d) = %v, want *StaleTokenError", s.token, err)
				}
				if se.Token != s.token || se.Highest != s.highest || se.Resource != res {
					t.Errorf("StaleTokenError = %+v, want token %d highest %d resource %q", *se, s.token, s.highest, res)
				}
				if ran != before {
					t.Error("effect ran for a stale token")
				}
			} else {
				if err != nil {
					t.Fatalf("Do(%d) = %v, want nil", s.token, err)
				}
				if ran != before+1 {
					t.Error("effect did not run once for an accepted token")
				}
			}
			if h := f.Highest(res); h != s.highest {
				t.Errorf("Highest = %d, want %d", h, s.highest)
			}
			if n := f.Rejected(); n != rejected {
				t.Errorf("Rejected() = %d, want %d", n, rejected)
			}
		})
	}
}

func TestMemFencePerResource(t *testing.T) {
	var f fence.Mem
	if err := f.Do("a", 10, nil); err != nil {
		t.Fatal(err)
	}
	// A high token on one resource says nothing about another.
	if err := f.Do("b", 2, nil); err != nil {
		t.Fatalf("Do(b, 2) after Do(a, 10) = %v", err)
	}
	if err := f.Do("b", 1, nil); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Do(b, 1) after Do(b, 2) = %v, want ErrStaleToken", err)
	}
	if h := f.Highest("a"); h != 10 {
		t.Errorf("Highest(a) = %d, want 10", h)
	}
	if h := f.Highest("b"); h != 2 {
		t.Errorf("Highest(b) = %d, want 2", h)
	}
	if h := f.Highest("c"); h != 0 {
		t.Errorf("Highest(c) = %d, want 0", h)
	}
	if n := f.Rejected(); n != 1 {
		t.Errorf("Rejected() = %d, want 1", n)
	}
}

func TestMemFenceEffectError(t *testing.T) {
	var f fence.Mem
	if err := f.Do("r", 10, nil); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk full")
	if err := f.Do("r", 20, func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do with a failing effect = %v, want the effect's error", err)
	}
	if h := f.Highest("r"); h != 10 {
		t.Fatalf("Highest = %d after a failed effect, want 10 (unchanged)", h)
	}
	// The failed token was not accepted, so a lower one still is.
	if err := f.Do("r", 15, nil); err != nil {
		t.Fatalf("Do(15) after failed Do(20) = %v", err)
	}
	if n := f.Rejected(); n != 0 {
		t.Errorf("Rejected() = %d, want 0 (an effect error is not a rejection)", n)
	}
}

func TestMemFenceConcurrent(t *testing.T) {
	var f fence.Mem
	const (
		workers = 16
		perW    = 500
		res     = "shared"
	)
	var (
		order    []kvlease.Token // appended inside the effect: serialized by the fence
		mu       sync.Mutex
		accepted []kvlease.Token
		stale    []*fence.StaleTokenError
		wg       sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 42))
			for range perW {
				tok := kvlease.Token(r.IntN(5000))
				err := f.Do(res, tok, func() error {
					order = append(order, tok)
					return nil
				})
				var se *fence.StaleTokenError
				mu.Lock()
				switch {
				case err == nil:
					accepted = append(accepted, tok)
				case errors.As(err, &se):
					stale = append(stale, se)
				default:
					t.Errorf("Do(%d) = %v", tok, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	if len(accepted)+len(stale) != workers*perW {
		t.Fatalf("%d accepted + %d stale != %d calls", len(accepted), len(stale), workers*perW)
	}
	if len(order) != len(accepted) {
		t.Fatalf("effect ran %d times for %d accepted tokens", len(order), len(accepted))
	}
	for i := 1; i < len(order); i++ {
		if order[i] < order[i-1] {
			t.Fatalf("accepted token %d after %d (effect #%d)", order[i], order[i-1], i)
		}
	}
	maxAccepted := slices.Max(accepted)
	if h := f.Highest(res); h != maxAccepted || h != order[len(order)-1] {
		t.Errorf("Highest = %d, want max accepted %d = last effect %d", h, maxAccepted, order[len(order)-1])
	}
	for _, se := range stale {
		if se.Token >= se.Highest || se.Highest > maxAccepted {
			t.Errorf("bad rejection %+v (max accepted %d)", *se, maxAccepted)
		}
	}
	if n := f.Rejected(); n != int64(len(stale)) {
		t.Errorf("Rejected() = %d, want %d", n, len(stale))
	}
	if len(stale) == 0 {
		t.Error("no token was rejected: the test did not exercise the fence")
	}
}

// openTestFence opens a fence bucket on its own connection to url.
func openTestFence(t *testing.T, url, bucket string) (*fence.KV, jetstream.JetStream) {
	t.Helper()
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, url))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	f, err := fence.OpenKV(ctx, js, bucket)
	if err != nil {
		t.Fatalf("OpenKV: %v", err)
	}
	return f, js
}

func TestKVFenceRoundTrip(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	f, _ := openTestFence(t, srv.ClientURL(), "fence")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const res = "db/row-1"

	// Said as a resource's, not a lease's: it read "kvlease: lease not
	// found: no value for …" (found by an outside client).
	if _, err := f.Read(ctx, res); !errors.Is(err, kvlease.ErrNotFound) || strings.Contains(err.Error(), "lease") {
		t.Fatalf("Read of a missing resource = %v, want ErrNotFound, naming no lease", err)
	}
	read := func(t *testing.T, want kvlease.Token, wantData string) {
		t.Helper()
		v, err := f.Read(ctx, res)
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if v.Token != want || string(v.Data) != wantData {
			t.Fatalf("Read = {%d %q}, want {%d %q}", v.Token, v.Data, want, wantData)
		}
	}
	if err := f.Write(ctx, res, 5, []byte("v1")); err != nil {
		t.Fatalf("first Write: %v", err)
	}
	read(t, 5, "v1")
	if err := f.Write(ctx, res, 5, []byte("v2")); err != nil {
		t.Fatalf("Write with an equal token: %v", err)
	}
	read(t, 5, "v2")
	if err := f.Write(ctx, res, 9, []byte("v3")); err != nil {
		t.Fatalf("Write with a higher token: %v", err)
	}
	read(t, 9, "v3")

	err := f.Write(ctx, res, 8, []byte("stale"))
	var se *fence.StaleTokenError
	if !errors.As(err, &se) || !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Write with a lower token = %v, want *StaleTokenError", err)
	}
	if se.Token != 8 || se.Highest != 9 || se.Resource != res {
		t.Errorf("StaleTokenError = %+v", *se)
	}
	read(t, 9, "v3")
	if n := f.Rejected(); n != 1 {
		t.Errorf("Rejected() = %d, want 1", n)
	}

	// Another fence on another connection sees the same state.
	g, _ := openTestFence(t, srv.ClientURL(), "fence")
	if err := g.Write(ctx, res, 3, []byte("stale")); !errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("second fence accepted a stale token: %v", err)
	}
	if v, err := g.Read(ctx, res); err != nil || v.Token != 9 {
		t.Errorf("second fence Read = %+v, %v; want token 9", v, err)
	}
	// Resources are independent.
	if err := g.Write(ctx, "db/row-2", 1, nil); err != nil {
		t.Errorf("Write to another resource with a low token: %v", err)
	}
}

func TestKVFenceInvalidName(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	f, _ := openTestFence(t, srv.ClientURL(), "fence")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for _, name := range []string{"", "a b", ".a", "a.", "a..b", "a*", "a>", "caf\u00e9"} {
		t.Run(fmt.Sprintf("%q", name), func(t *testing.T) {
			err := f.Write(ctx, name, 1, []byte("x"))
			if !errors.Is(err, kvlease.ErrInvalidName) {
				t.Errorf("Write(%q) = %v, want ErrInvalidName", name, err)
			}
			if err != nil && !strings.Contains(err.Error(), "resource name") {
				t.Errorf("Write(%q) = %v, want it to say it is the resource name", name, err)
			}
		})
	}
	t.Run("Read", func(t *testing.T) {
		if _, err := f.Read(ctx, "a b"); !errors.Is(err, kvlease.ErrInvalidName) {
			t.Errorf("Read(%q) = %v, want ErrInvalidName", "a b", err)
		}
	})
	if n := f.Rejected(); n != 0 {
		t.Errorf("Rejected() = %d after invalid names, want 0", n)
	}
}

// TestKVFenceRace has two fences on separate connections, four writers
// each, racing to write increasing tokens to one resource. The fence is sound
// if the stored token never decreases: checked on every revision a watcher
// sees, on every accepted Write against a Read just before it, and on the
// final value, which must be the highest accepted token.
func TestKVFenceRace(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	const (
		bucket = "fence"
		res    = "db/counter"
		perW   = 25
	)
	fa, js := openTestFence(t, srv.ClientURL(), bucket)
	fb, _ := openTestFence(t, srv.ClientURL(), bucket)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	// Watch every revision of the resource, from before the first write.
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, res, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	type result struct {
		token, before kvlease.Token // written; read just before
		after         kvlease.Token // read just after
		err           error
	}
	var (
		mu      sync.Mutex
		results []result
		wg      sync.WaitGroup
	)
	fences := []*fence.KV{fa, fb}
	for i := range 8 {
		f := fences[i%2]
		wg.Go(func() {
			tok := kvlease.Token(0)
			r := rand.New(rand.NewPCG(uint64(i), 7))
			for range perW {
				tok += kvlease.Token(1 + r.IntN(8)) // increasing per writer, interleaved across writers
				var res1 result
				res1.token = tok
				if v, err := f.Read(ctx, res); err == nil {
					res1.before = v.Token
				} else if !errors.Is(err, kvlease.ErrNotFound) {
					t.Errorf("Read: %v", err)
					return
				}
				res1.err = f.Write(ctx, res, tok, fmt.Appendf(nil, "w%d t%d", i, tok))
				v, err := f.Read(ctx, res)
				if err != nil {
					t.Errorf("Read after Write: %v", err)
					return
				}
				res1.after = v.Token
				mu.Lock()
				results = append(results, res1)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	var maxAccepted kvlease.Token
	accepted, stale := 0, 0
	for _, r := range results {
		var se *fence.StaleTokenError
		switch {
		case r.err == nil:
			accepted++
			maxAccepted = max(maxAccepted, r.token)
			// The stored token never decreases, so an accepted write was at
			// least what was stored before it, and what is stored after it is
			// at least the write.
			if r.token < r.before {
				t.Errorf("Write(%d) accepted although %d was stored before it", r.token, r.before)
			}
			if r.after < r.token {
				t.Errorf("after Write(%d) succeeded, the stored token is %d", r.token, r.after)
			}
		case errors.As(r.err, &se):
			stale++
			if se.Token != r.token || se.Highest <= r.token || r.after < se.Highest {
				t.Errorf("rejection %+v for token %d (read after: %d)", *se, r.token, r.after)
			}
		default:
			t.Errorf("Write(%d): %v", r.token, r.err)
		}
	}
	if accepted == 0 || stale == 0 {
		t.Logf("accepted %d, stale %d", accepted, stale)
	}
	if n := fa.Rejected() + fb.Rejected(); n != int64(stale) {
		t.Errorf("Rejected() total %d, want %d", n, stale)
	}

	final, err := fa.Read(ctx, res)
	if err != nil {
		t.Fatal(err)
	}
	if final.Token != maxAccepted {
		t.Fatalf("final token %d, want the highest accepted %d: a lower token overwrote a higher one", final.Token, maxAccepted)
	}
	e, err := kv.Get(ctx, res)
	if err != nil {
		t.Fatal(err)
	}
	finalRev := e.Revision()

	// Every revision the watcher saw (history 1 may make it skip some, never
	// reorder them) carries a token at least that of the one before.
	var prev kvlease.Token
	seen := 0
	for done := false; !done; {
		select {
		case e := <-w.Updates():
			if e == nil {
				continue
			}
			var v fence.Value
			if err := json.Unmarshal(e.Value(), &v); err != nil {
				t.Fatalf("revision %d: %v", e.Revision(), err)
			}
			if v.Token < prev {
				t.Errorf("revision %d stored token %d after %d", e.Revision(), v.Token, prev)
			}
			prev = v.Token
			seen++
			done = e.Revision() >= finalRev
		case <-ctx.Done():
			t.Fatalf("watcher did not reach revision %d", finalRev)
		}
	}
	if seen < 2 {
		t.Errorf("watcher saw %d revisions", seen)
	}
	t.Logf("%d writes: %d accepted, %d stale; watcher saw %d revisions; final token %d",
		len(results), accepted, stale, seen, final.Token)
}

// fence.KV answers bad input as the other fences do, before anything is
// sent: a bucket name the server refuses is an invalid option (it was
// "unavailable", which callers retry), token 0 an invalid token (it was
// accepted).
func TestKVFenceRefusesBadInput(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	for _, b := range []string{"", "a.b", "a b"} {
		if _, err := fence.OpenKV(ctx, js, b); !errors.Is(err, kvlease.ErrInvalidOption) || errors.Is(err, kvlease.ErrUnavailable) {
			t.Errorf("OpenKV(%q): %v, want ErrInvalidOption", b, err)
		}
	}
	f, err := fence.OpenKV(ctx, js, "fences")
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []kvlease.Token{0, math.MaxInt64 + 1} {
		if err := f.Write(ctx, "r1", tok, []byte("x")); !errors.Is(err, fence.ErrInvalidToken) {
			t.Errorf("Write with token %d: %v, want ErrInvalidToken", tok, err)
		}
	}
	if err := f.Write(ctx, "r1", 11, []byte("x")); err != nil {
		t.Errorf("Write with token 11 after the invalid ones: %v", err)
	}
	// A value that is not a fence's (put there by hand) is refused, typed
	// as the lease core types a record that is not one: it was an error
	// no errors.Is matched, not to be told from an outage (found in review).
	kv, err := js.KeyValue(ctx, "fences")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "r2", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if err := f.Write(ctx, "r2", 12, []byte("x")); !errors.Is(err, kvlease.ErrBucket) {
		t.Errorf("Write over a value that is not a fence's: %v, want ErrBucket", err)
	}
	if _, err := f.Read(ctx, "r2"); !errors.Is(err, kvlease.ErrBucket) {
		t.Errorf("Read of a value that is not a fence's: %v, want ErrBucket", err)
	}
}

// Opening an existing fence bucket without WithReplicas keeps its replica
// count: it made an R3 bucket R1, its highest tokens on one node (found by
// an outside client).
func TestOpenKVKeepsTheBucketsReplicas(t *testing.T) {
	servers := kvleasetest.NewCluster(t, 3)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, servers[0].ClientURL()))
	ctx := t.Context()
	for _, opts := range [][]fence.KVOption{{fence.WithReplicas(3)}, nil} {
		if _, err := kvlease.RetryUnavailable(ctx, 30*time.Second, nil, func() (*fence.KV, error) {
			return fence.OpenKV(ctx, js, "replicated", opts...)
		}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := js.Stream(ctx, "KV_replicated")
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().Config.Replicas; n != 3 {
		t.Fatalf("replicas %d after an open without WithReplicas, want the bucket's 3", n)
	}
}

// OpenKV refuses a bucket whose entries expire, the lease bucket above
// all: a fence opened on it took a write, which showed as a lease held by
// "" that never lapsed, and a fence whose values expire forgets its
// highest token (found by an outside client).
func TestOpenKVRefusesABucketThatExpires(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	if _, err := kvlease.Open(ctx, js); err != nil { // the lease bucket, "leases"
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "aging", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{kvlease.DefaultBucket, "aging"} {
		if _, err := fence.OpenKV(ctx, js, b); !errors.Is(err, kvlease.ErrBucket) || errors.Is(err, kvlease.ErrUnavailable) {
			t.Errorf("OpenKV(%q): %v, want ErrBucket", b, err)
		}
	}
}

// A KV fence can be raised as the lease is taken, before the work, without
// writing a value (docs/fencing.md, "Raise the fence when you take the
// lease"): the doc pointed at a fence.KV Check that did not exist, and a
// Write to raise it replaced the stored data.
func TestKVFenceRaise(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	f, _ := openTestFence(t, srv.ClientURL(), "fence")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const res = "db/row-raise"
	if err := f.Write(ctx, res, 5, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if err := f.Raise(ctx, res, 7); err != nil {
		t.Fatalf("Raise to 7: %v", err)
	}
	if v, err := f.Read(ctx, res); err != nil || v.Token != 7 || string(v.Data) != "v1" {
		t.Fatalf("Read after Raise = {%d %q}, %v; want {7 \"v1\"}", v.Token, v.Data, err)
	}
	if err := f.Write(ctx, res, 6, []byte("late")); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Write of a token below the raised one = %v, want ErrStaleToken", err)
	}
	if err := f.Raise(ctx, res, 6); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Raise to a lower token = %v, want ErrStaleToken", err)
	}
	if err := f.Write(ctx, res, 7, []byte("v2")); err != nil {
		t.Fatalf("Write with the raised token: %v", err)
	}
	if err := f.Raise(ctx, "db/row-new", 3); err != nil {
		t.Fatalf("Raise of a resource never written: %v", err)
	}
	if v, err := f.Read(ctx, "db/row-new"); err != nil || v.Token != 3 || len(v.Data) != 0 {
		t.Fatalf("Read of a raised, never written resource = {%d %q}, %v; want {3 \"\"}", v.Token, v.Data, err)
	}
}
