package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// A grant request that waits in a paused node (SIGSTOP) while its caller
// times out and retries through another node is carried out late, when the
// node resumes. With a request id that costs nothing: the late attempt is
// answered with the tenure the retry made while it lasts ("recovered"),
// and with request_used once it has ended; it never grants the lease again,
// which without the request id left it held by nobody for a full TTL.
func TestClusterPausedNodeHoldsGrantRequest(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	lead := c.leader(0)
	paused, other := (lead+1)%3, (lead+2)%3 // a follower pauses; the stream keeps its leader
	t.Logf("stream leader %s, pausing %s", c.nodes[lead].Name, c.nodes[paused].Name)

	// The caller's first connection is to the node that will pause; its
	// retry goes through another.
	stuck := kvleasetest.Connect(t, c.url(paused), nats.IgnoreDiscoveredServers(), nats.PingInterval(time.Hour))
	replies, err := stuck.SubscribeSync(stuck.NewRespInbox())
	if err != nil {
		t.Fatal(err)
	}
	if err := stuck.Flush(); err != nil {
		t.Fatal(err)
	}
	retry, err := client.New(kvleasetest.Connect(t, c.url(other)))
	if err != nil {
		t.Fatal(err)
	}
	// A client that has had a reply (a fresh one first reads the
	// grantor's clock, which could go to the node about to pause).
	if _, err := kvlease.RetryUnavailable(ctx, time.Second, nil, func() (api.Lease, error) {
		return retry.Get(ctx, "paused.none")
	}); !errors.Is(err, kvlease.ErrNotFound) {
		t.Fatalf("get of a lease never granted: %v", err)
	}
	rid, secret := kvlease.NewRequestID()
	req := kvlease.GrantRequest{Name: "paused.job", Holder: "caller", Duration: 20 * time.Second, RequestID: rid, Secret: secret}
	body, _ := json.Marshal(api.GrantRequest{Name: req.Name, Holder: req.Holder, TTL: api.TTL(req.Duration),
		RequestID: rid, Secret: secret})
	// get reads the lease through the node that was never paused; a node
	// resuming can leave JetStream briefly unavailable (503) there too.
	check := c.store(other)
	get := func() (kvlease.Record, error) {
		return kvlease.RetryUnavailable(ctx, time.Second, nil, func() (kvlease.Record, error) {
			return check.Get(ctx, req.Name)
		})
	}

	proc := c.procs[paused].cmd.Process
	// sendStuck pauses the node and sends msg on its connection, where it
	// waits in the node's socket until the node resumes.
	sendStuck := func(msg *nats.Msg) {
		t.Helper()
		kvleasetest.StopProcess(t, proc)
		t.Cleanup(func() { _ = proc.Signal(syscall.SIGCONT) })
		if err := stuck.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	grantMsg := func(body []byte) *nats.Msg {
		msg := nats.NewMsg(api.SubjectGrant)
		msg.Reply, msg.Data = replies.Subject, body
		return msg
	}
	// lateAnswer resumes the node and returns the late attempt msg's
	// answer. A node just resumed may not answer it at all: its routes and
	// its own service's connection are being re-established (no
	// responders), its JetStream is not ready (unavailable), or it dropped
	// the stuck connection as stale, the attempt with it (no answer; the
	// connection comes back by itself). The same attempt, sent again on
	// that connection, is then as late: what it is answered is what the
	// late attempt would have been told.
	lateAnswer := func(msg *nats.Msg) (api.Lease, string) {
		t.Helper()
		if err := proc.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		for attempt := 1; ; attempt++ {
			m, err := replies.NextMsg(10 * time.Second)
			code := ""
			if err == nil {
				code = m.Header.Get(api.HeaderErrorCode)
			}
			if (errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) || code == api.CodeUnavailable) && attempt < 6 {
				t.Logf("the resumed node answered the late attempt %v %q: sending it again", err, code)
				time.Sleep(200 * time.Millisecond) // a pause before sending again, as any client's retry
				if err := stuck.PublishMsg(msg); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("no answer to the request that waited in the paused node: %v", err)
			}
			var l api.Lease
			if code != "" {
				return l, code
			}
			if err := json.Unmarshal(m.Data, &l); err != nil {
				t.Fatal(err)
			}
			return l, ""
		}
	}

	// 1. The retry makes the tenure; the late attempt is told of it. The
	// service's queue group may hand a retry to the paused node too, where
	// it waits as well: each attempt is bounded, as Acquire's are.
	late1 := grantMsg(body)
	sendStuck(late1)
	rec, err := kvlease.RetryUnavailable(ctx, time.Second, nil, func() (kvlease.Record, error) {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return retry.Grant(actx, req)
	})
	if err != nil {
		t.Fatalf("retry through %s: %v", c.nodes[other].Name, err)
	}
	late, code := lateAnswer(late1)
	if code != "" || late.Token != uint64(rec.Token) || !late.Recovered {
		t.Fatalf("late attempt while the tenure lives: %+v, %q; want token %d, recovered", late, code, rec.Token)
	}
	if cur, err := get(); err != nil || cur.Token != rec.Token {
		t.Fatalf("lease after the late attempt: %+v, %v; want the retry's tenure %d", cur, err, rec.Token)
	}

	// 2. Once the tenure has ended, a late attempt grants nothing.
	late2 := grantMsg(body)
	sendStuck(late2)
	_, err = kvlease.RetryUnavailable(ctx, time.Second, nil, func() (struct{}, error) {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return struct{}{}, retry.Release(actx, kvlease.ReleaseRequest{Name: req.Name, Holder: req.Holder, Token: rec.Token,
			Revision: rec.Revision, Secret: secret})
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, code := lateAnswer(late2); code != api.CodeRequestUsed {
		t.Errorf("late attempt after the release: %q, want %s", code, api.CodeRequestUsed)
	}
	if cur, err := get(); !errors.Is(err, kvlease.ErrNotFound) {
		t.Fatalf("lease after the late attempt: %s", fmt.Sprint(cur, err))
	}

	// 3. A request whose caller gave up before any attempt was carried out
	// (its retries were told "held", or its context ended) would grant the
	// lease, free by then, to nobody. It carries its deadline, and arrives
	// after it: it is not carried out.
	rid2, secret2 := kvlease.NewRequestID()
	body, _ = json.Marshal(api.GrantRequest{Name: req.Name, Holder: req.Holder, TTL: api.TTL(req.Duration),
		RequestID: rid2, Secret: secret2})
	late3 := grantMsg(body)
	// Its caller gave up a second ago (every node's clock is this machine's).
	late3.Header.Set(api.HeaderDeadline, fmt.Sprint(time.Now().Add(-time.Second).UnixMilli()))
	sendStuck(late3)
	if _, code := lateAnswer(late3); code != api.CodeTooLate {
		t.Errorf("request past its deadline: %q, want %s", code, api.CodeTooLate)
	}
	if cur, err := get(); !errors.Is(err, kvlease.ErrNotFound) {
		t.Fatalf("lease after the request past its deadline: %s", fmt.Sprint(cur, err))
	}
}
