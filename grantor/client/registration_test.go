package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// Register refuses keeper options that Keep would refuse before it sends
// anything, as election.Campaign and workqueue.Claim do: it granted the
// registration first, then released it, and with the instance registered
// by another it answered "held", never naming the bad option (found by an
// outside client).
func TestRegisterRefusesBadKeeperOptionsBeforeSending(t *testing.T) {
	reg := api.Registration{Service: "web", Instance: "i1", Addr: "10.0.0.7:8080"}
	for name, tc := range map[string]struct {
		opt  kvlease.KeeperOption
		want error
	}{
		"nil option":        {nil, kvlease.ErrInvalidOption},
		"nil OnLost":        {kvlease.WithOnLost(nil), kvlease.ErrInvalidOption},
		"interval too long": {kvlease.WithRenewInterval(2 * time.Second), kvlease.ErrInvalidTiming},
	} {
		t.Run(name, func(t *testing.T) {
			g := kvleasetest.NewFakeGrantor()
			k, err := client.Register(t.Context(), g, reg, "h1", 3*time.Second, tc.opt)
			if !errors.Is(err, tc.want) || k != nil {
				t.Fatalf("Register = %v, %v; want %v", k, err, tc.want)
			}
			if n := g.Grants(); n != 0 {
				t.Fatalf("%d grants sent for a registration refused", n)
			}
		})
	}
}

// Discover pages a discovery that does not fit one reply, and against a
// service too old to page (it refuses the limit as an unknown field)
// reports the first refusal, too_large, not the second.
func TestDiscoverPagesOnlyWhatIsTooLarge(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	nc := kvleasetest.Connect(t, srv.ClientURL())
	var mu sync.Mutex // guards paging and asked
	paging := true
	var asked []api.DiscoverRequest
	all := []string{"a", "b", "c", "d", "e"}
	kvleasetest.Subscribe(t, nc, api.SubjectDiscover, func(m *nats.Msg) {
		var req api.DiscoverRequest
		_ = json.Unmarshal(m.Data, &req)
		mu.Lock()
		asked = append(asked, req)
		paging := paging
		mu.Unlock()
		switch {
		case req.Limit == 0:
			refuse(m, "discover", fmt.Errorf("%w: the instances exceed the server's max payload", api.ErrTooLarge))
		case !paging:
			refuse(m, "discover", fmt.Errorf("%w: json: unknown field \"limit\"", api.ErrInvalidRequest))
		default:
			rest := all[sort.SearchStrings(all, req.After+"\x00"):]
			rep := api.DiscoverReply{Threshold: 8, More: len(rest) > 2} // two fit a page
			for _, in := range rest[:min(2, len(rest))] {
				rep.Instances = append(rep.Instances, api.Instance{Registration: api.Registration{Service: "web", Instance: in}})
			}
			data, _ := json.Marshal(rep)
			_ = m.Respond(data)
		}
	})
	c, err := client.New(nc, client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c.Discover(t.Context(), "web", 0)
	var got []string
	for _, in := range rep.Instances {
		got = append(got, in.Instance)
	}
	if err != nil || !slices.Equal(got, all) || rep.Threshold != 8 || rep.More {
		t.Fatalf("Discover = %v (threshold %v, more %v), %v; want %v, threshold 8", got, rep.Threshold, rep.More, err, all)
	}
	mu.Lock()
	if want := []string{"", "", "b", "d"}; len(asked) != 4 || asked[0].Limit != 0 ||
		!slices.Equal([]string{asked[0].After, asked[1].After, asked[2].After, asked[3].After}, want) {
		t.Errorf("asked %+v; want the whole, then pages after %q", asked, want[1:])
	}
	paging = false
	mu.Unlock()
	if _, err := c.Discover(t.Context(), "web", 0); !errors.Is(err, api.ErrTooLarge) {
		t.Errorf("Discover from a service that does not page: %v, want too_large", err)
	}
}

// refuse answers m as the service refuses a request of verb with err.
func refuse(m *nats.Msg, verb string, err error) {
	body := api.ErrorBodyOf(verb, err)
	data, _ := json.Marshal(body)
	r := nats.NewMsg(m.Reply)
	r.Data = data
	r.Header.Set(api.HeaderErrorCode, body.Code)
	r.Header.Set(api.HeaderError, body.Message)
	_ = m.RespondMsg(r)
}
