package cli

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// nats-server's health check fails one look now and then on a healthy
// node under load ("not current: group node unhealthy", "failed to be
// ready for connections after 1ms:"), gone at the next: /healthz says ok
// over such a look, and 503 only for a failure that lasts (found polling
// a three-node cluster's /healthz under leased bench: each node answered
// 503 one poll in a few hundred, the bench seeing no error).
func TestServeHealthOverlooksAPassingFailure(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	nc := kvleasetest.Connect(t, srv.ClientURL())
	st := kvleasetest.OpenStoreOn(t, nc)
	errLag := errors.New("the embedded NATS server: JetStream stream '$G > KV_leases' is not current: group node unhealthy")
	for _, tc := range []struct {
		name  string
		fails int64 // looks that fail before one passes; -1: all
		ok    bool
	}{
		{"healthy", 0, true},
		{"one look fails", 1, true}, // asked again whatever the time: no race with the clock
		{"it lasts", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var looks atomic.Int64
			nats := func() error {
				if n := looks.Add(1); tc.fails < 0 || n <= tc.fails {
					return errLag
				}
				return nil
			}
			err := serveHealth(nc, nats, st)()
			switch {
			case tc.ok && err != nil:
				t.Errorf("/healthz's check after %d failed looks: %v, want ok", tc.fails, err)
			case !tc.ok && (err == nil || !strings.Contains(err.Error(), "not current")):
				t.Errorf("/healthz's check with nats-server's health failing for good: %v, want its reason", err)
			case !tc.ok && looks.Load() < 2:
				t.Errorf("nats-server's health asked %d times, want it asked again", looks.Load())
			}
		})
	}
}

// A node whose writes are refused for the NATS server's storage limit can
// grant nothing: /healthz says so (it said 200 ok, its reads answering,
// while every grant and renewal was refused), until a write is accepted.
func TestServeHealthSaysStorageIsFull(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	nc := kvleasetest.Connect(t, srv.ClientURL())
	st := kvleasetest.OpenStoreOn(t, nc)
	health := serveHealth(nc, nil, st)
	ctx := t.Context()
	first, err := st.Grant(ctx, kvlease.GrantRequest{Name: "first", Holder: "h", Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	renew := func() error {
		_, err := st.Renew(ctx, kvlease.RenewRequest{Name: "first", Holder: "h", Token: first.Token, Revision: first.Revision,
			Duration: time.Minute})
		return err
	}
	srv.LimitAccountStore(t, 1) // under what is stored: nothing more fits
	if err := renew(); !errors.Is(err, kvlease.ErrStoreFull) {
		t.Fatalf("renewal past the account's storage limit: %v, want ErrStoreFull", err)
	}
	if err := health(); err == nil || !strings.Contains(err.Error(), "storage is full") {
		t.Errorf("/healthz's check while writes are refused for the storage limit: %v, want it to say the storage is full", err)
	}
	srv.LimitAccountStore(t, -1)
	if err := renew(); err != nil {
		t.Fatalf("renewal once the limit is lifted: %v", err)
	}
	if err := health(); err != nil {
		t.Errorf("/healthz's check once a write is accepted again: %v, want ok", err)
	}
}

// A refusal for the storage limit is /healthz's answer for a minute, if
// no write is accepted after it: a node no one writes to whose limit was
// raised is healthy again.
func TestStorageFullHealthLasts(t *testing.T) {
	refused := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		refused time.Time
		now     time.Time
		full    bool
	}{
		{time.Time{}, refused, false},
		{refused, refused.Add(time.Second), true},
		{refused, refused.Add(storageFullFor - time.Millisecond), true},
		{refused, refused.Add(storageFullFor), false},
	} {
		if err := storageFull(tc.refused, tc.now); (err != nil) != tc.full {
			t.Errorf("refused at %v, asked at %v: %v, want full %v", tc.refused, tc.now, err, tc.full)
		}
	}
}
