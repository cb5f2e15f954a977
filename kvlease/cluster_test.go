package kvlease_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// Every member of a cluster that is still forming opens the R3 bucket at
// the same time, as the grantors of `leased dev-cluster` do when they start
// together: each Open must wait out the cluster's silence and the moment in
// which the new stream answers "not found", and succeed. (CI once saw a
// grantor give up on exactly that "not found".)
func TestOpenWhileClusterForms(t *testing.T) {
	rounds := 4
	if longTests() {
		rounds = 15
	}
	for round := range rounds {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			servers := kvleasetest.NewCluster(t, 3)
			ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
			defer cancel()
			stores := make([]*kvlease.Store, len(servers))
			errs := make([]error, len(servers))
			var wg sync.WaitGroup
			for i, s := range servers {
				js := kvleasetest.JetStream(t, kvleasetest.Connect(t, s.ClientURL()))
				wg.Go(func() { stores[i], errs[i] = kvlease.Open(ctx, js, kvlease.WithReplicas(3)) })
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("open through n%d: %v", i+1, err)
				}
			}
			rec, err := stores[0].Grant(ctx, kvlease.GrantRequest{Name: "job", Holder: "a", Duration: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range stores[1:] {
				got, err := st.Get(ctx, "job")
				if err != nil || got.Token != rec.Token {
					t.Fatalf("get through n%d: %+v, %v; want token %d", i+2, got, err, rec.Token)
				}
			}
		})
	}
}

func longTests() bool { return os.Getenv("LEASED_LONG") == "1" }
