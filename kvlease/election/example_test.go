package election_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/leased/leased/kvlease/election"
	"github.com/leased/leased/kvlease/kvleasetest"
)

func ExampleElection() {
	store, _, stop, err := kvleasetest.StartStore()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	ctx := context.Background()

	e, err := election.New(store, "leader.billing")
	if err != nil {
		fmt.Println(err)
		return
	}
	lead, err := e.Campaign(ctx, "node-1", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	cur, _ := e.Leader(ctx)
	fmt.Println("leader:", cur.Holder, "token:", lead.Token())

	// A second candidate waits for the first to resign.
	next := make(chan *election.Leadership)
	go func() {
		l, _ := e.Campaign(ctx, "node-2", 10*time.Second)
		next <- l
	}()
	_ = lead.Resign(ctx)
	second := <-next
	cur, _ = e.Leader(ctx)
	fmt.Println("leader:", cur.Holder, "higher token:", second.Token() > lead.Token())
	_ = second.Resign(ctx)
	// Output:
	// leader: node-1 token: 1
	// leader: node-2 higher token: true
}
