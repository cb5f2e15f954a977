package client

import (
	"sync"
	"time"

	"github.com/leased/leased/kvlease"
)

// seenTokens remembers, per lease, the highest token a reply to this
// client has shown, for seenWindow: a "held" answer naming an older tenure
// comes from a node whose view is behind one this client has seen (a
// stream leader cut off from its peers that has not yet stepped down reads
// from its frozen state), and is not an answer. ZooKeeper's clients refuse
// a server behind the last zxid they saw for the same reason. The window
// bounds what a bucket deleted and created again (its tokens start over)
// can cost: refusals for that long. Memory is bounded by seenMax leases.
type seenTokens struct {
	mu sync.Mutex
	m  map[string]seenToken
}

type seenToken struct {
	token kvlease.Token
	at    time.Time
}

const (
	seenWindow = time.Minute
	seenMax    = 4096
)

// note records that a reply showed tenure tok of name at now.
func (s *seenTokens) note(name string, tok kvlease.Token, now time.Time) {
	if tok == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[string]seenToken)
	}
	if cur, ok := s.m[name]; ok && cur.token > tok && now.Sub(cur.at) < seenWindow {
		return
	}
	if _, ok := s.m[name]; !ok && len(s.m) >= seenMax {
		s.evictLocked(now)
	}
	s.m[name] = seenToken{tok, now}
}

// newer returns a token of name above tok seen within the window.
func (s *seenTokens) newer(name string, tok kvlease.Token, now time.Time) (kvlease.Token, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.m[name]
	if !ok || cur.token <= tok || now.Sub(cur.at) >= seenWindow {
		return 0, false
	}
	return cur.token, true
}

// evictLocked makes room: the entries past the window, else any one.
func (s *seenTokens) evictLocked(now time.Time) {
	for name, e := range s.m {
		if now.Sub(e.at) >= seenWindow {
			delete(s.m, name)
		}
	}
	for name := range s.m {
		if len(s.m) < seenMax {
			return
		}
		delete(s.m, name)
	}
}
