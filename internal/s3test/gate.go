package s3test

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// # Holding the server's answers
//
// A Gate is a TCP proxy on 127.0.0.1 in front of a Server, for a test
// that must see a transfer half done without racing it: a client given
// the gate's Endpoint sends its requests through as they come, and gets
// the server's answers while the gate is open; Hold lets a number of
// bytes of answers more through and then holds the rest, until Open.
// What the client has received is then known exactly, whatever the
// speed of the machine.

// Gate is a proxy in front of a server (see above).
type Gate struct {
	// Endpoint is the URL to give a client: http://127.0.0.1:PORT.
	Endpoint string

	l      net.Listener
	target string // the server's host:port

	mu      sync.Mutex
	moved   *sync.Cond
	budget  int64 // answer bytes still let through; < 0: open
	passed  int64 // answer bytes let through in all
	waiting int   // answers waiting to be let through
	closed  bool
	conns   []net.Conn
}

// StartGate starts a gate in front of srv, open, and closes it at the
// end of the test.
func StartGate(t testing.TB, srv *Server) *Gate {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &Gate{Endpoint: "http://" + l.Addr().String(), l: l, target: strings.TrimPrefix(srv.Endpoint, "http://"), budget: -1}
	g.moved = sync.NewCond(&g.mu)
	go g.serve()
	t.Cleanup(g.close)
	return g
}

// Hold lets n more bytes of the server's answers through, then holds
// the rest.
func (g *Gate) Hold(n int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.budget = n
	g.moved.Broadcast()
}

// Open lets every answer through.
func (g *Gate) Open() { g.Hold(-1) }

// Passed returns how many bytes of answers the gate let through.
func (g *Gate) Passed() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.passed
}

// Held reports whether the gate holds an answer back: it let its
// budget through, and has more to send.
func (g *Gate) Held() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.budget == 0 && g.waiting > 0
}

func (g *Gate) close() {
	g.mu.Lock()
	g.closed = true
	conns := g.conns
	g.moved.Broadcast()
	g.mu.Unlock()
	_ = g.l.Close()
	for _, c := range conns {
		_ = c.Close()
	}
}

func (g *Gate) serve() {
	for {
		c, err := g.l.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", g.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		g.mu.Lock()
		if g.closed {
			g.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			return
		}
		g.conns = append(g.conns, c, s)
		g.mu.Unlock()
		go func() {
			_, _ = io.Copy(s, c)
			_ = s.Close()
		}()
		go func() {
			g.answer(c, s)
			_ = c.Close()
		}()
	}
}

// answer copies the server's answers from s to the client c, as the
// gate lets them through.
func (g *Gate) answer(c, s net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		for p := buf[:n]; len(p) > 0; {
			k, ok := g.take(int64(len(p)))
			if !ok {
				return
			}
			if _, werr := c.Write(p[:k]); werr != nil {
				return
			}
			p = p[k:]
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = c.Close()
			}
			return
		}
	}
}

// take waits until the gate lets some of n bytes through, and returns
// how many; false once the gate is closed.
func (g *Gate) take(n int64) (int64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waiting++
	defer func() { g.waiting-- }()
	for g.budget == 0 && !g.closed {
		g.moved.Wait()
	}
	if g.closed {
		return 0, false
	}
	if g.budget > 0 {
		n = min(n, g.budget)
		g.budget -= n
	}
	g.passed += n
	return n, true
}
