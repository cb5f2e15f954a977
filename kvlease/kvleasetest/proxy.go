package kvleasetest

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards TCP connections to a target and can cut them: a partition
// between a client and the server, with real sockets. While cut, bytes in
// both directions are dropped and the connections stay open, so the client
// sees silence (timeouts), as in a real partition, not a reset.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cut     bool          // both directions
	replies bool          // server to client only
	delay   time.Duration // of what the server sends (DelayReplies)
	conns   []net.Conn
	wg      sync.WaitGroup
}

// NewProxy listens on a free 127.0.0.1 port and forwards to target
// (host:port). It stops on cleanup.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("kvleasetest: proxy listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.close)
	return p
}

// URL returns the nats:// URL of the proxy.
func (p *Proxy) URL() string { return "nats://" + p.ln.Addr().String() }

// Cut starts dropping all traffic.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
}

// DropReplies starts dropping what the server sends while what clients
// send still arrives: requests reach the server and are carried out, and
// their replies are lost. Heal ends it.
func (p *Proxy) DropReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.replies = true
}

// DelayReplies delays what the server sends by d from now on (0: no
// longer): a slow link, on which requests to a subscriber of the
// server, and answers to requests, arrive d late.
func (p *Proxy) DelayReplies(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Heal ends the partition (or the dropping of replies). Connections that lost bytes while cut are
// closed (their protocol streams are torn), so clients reconnect through the
// proxy, as they would after a real partition ends in a reset.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut, p.replies = false, false
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *Proxy) dropping(reply bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut || (reply && p.replies)
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(up, c, false)
		go p.pipe(c, up, true)
	}
}

// pipe copies src to dst; reply is the server-to-client direction, which
// a writer of its own delays (DelayReplies).
func (p *Proxy) pipe(dst, src net.Conn, reply bool) {
	defer p.wg.Done()
	defer dst.Close()
	write := func(b []byte) error { _, err := dst.Write(b); return err }
	if reply {
		type chunk struct {
			due time.Time
			b   []byte
		}
		q := make(chan chunk, 1024)
		failed := make(chan struct{})
		defer close(q)
		go func() {
			defer close(failed)
			for c := range q {
				time.Sleep(time.Until(c.due))
				if _, err := dst.Write(c.b); err != nil {
					return
				}
			}
		}()
		write = func(b []byte) error {
			p.mu.Lock()
			d := p.delay
			p.mu.Unlock()
			select {
			case q <- chunk{time.Now().Add(d), bytes.Clone(b)}:
				return nil
			case <-failed:
				return net.ErrClosed
			}
		}
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.dropping(reply) {
			if werr := write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				src.Close()
			}
			return
		}
	}
}

func (p *Proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
