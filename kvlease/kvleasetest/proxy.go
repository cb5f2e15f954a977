package kvleasetest

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a target and can cut them: a partition
// between a client and the server, with real sockets. While cut, bytes in
// both directions are dropped and the connections stay open, so the client
// sees silence (timeouts), as in a real partition, not a reset.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cut     bool // both directions
	replies bool // server to client only
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

// pipe copies src to dst; reply is the server-to-client direction.
func (p *Proxy) pipe(dst, src net.Conn, reply bool) {
	defer p.wg.Done()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.dropping(reply) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
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
