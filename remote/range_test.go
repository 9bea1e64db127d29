package remote

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// cutTransport cuts the body of the first GET of every object under
// team/objects/ after cut bytes, as a connection reset does, and
// records the Range header of every such GET.
type cutTransport struct {
	cut    int64
	stall  bool // past cut, the body brings nothing until the request is cancelled
	mu     sync.Mutex
	cutOff map[string]bool
	ranges []string
}

func (c *cutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || !strings.Contains(req.URL.Path, "/team/objects/") {
		return resp, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ranges = append(c.ranges, req.Header.Get("Range"))
	if !c.cutOff[req.URL.Path] {
		c.cutOff[req.URL.Path] = true
		body := &cutBody{r: io.LimitReader(resp.Body, c.cut), c: resp.Body}
		if c.stall {
			body.stall = req.Context().Done()
		}
		resp.Body = body
	}
	return resp, nil
}

type cutBody struct {
	r     io.Reader
	c     io.Closer
	stall <-chan struct{}
}

func (b *cutBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		if b.stall != nil && n == 0 {
			<-b.stall // a server that stalls: until the client gives up
			return 0, context.Canceled
		}
		return n, errors.New("connection reset by the test")
	}
	return n, err
}

func (b *cutBody) Close() error { return b.c.Close() }

// TestReadObjectFrom: the bytes from an offset come with a ranged GET;
// a response cut half way goes on from where it stopped (each byte
// written once), with a ranged GET; CheckObject refuses a wrong hash
// with ErrCorrupt, naming the key.
func TestReadObjectFrom(t *testing.T) {
	ct := &cutTransport{cut: 400_000, cutOff: map[string]bool{}}
	testTransport = ct
	t.Cleanup(func() { testTransport = nil })
	_, r := openTest(t)
	data := bigData(1 << 20)
	ups := uploads(t, fileObject(t, t.TempDir(), "big", data))
	if _, err := r.Push(context.Background(), ups, nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	sum := ups[0].Sum
	var got bytes.Buffer
	if err := r.ReadObjectFrom(context.Background(), sum, 0, &got); err != nil {
		t.Fatalf("ReadObjectFrom through a connection cut half way: %v", err)
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Errorf("read %d bytes, not the object's %d", got.Len(), len(data))
	}
	if want := []string{"", "bytes=400000-"}; !slices.Equal(ct.ranges, want) {
		t.Errorf("GETs with ranges %q, want %q", ct.ranges, want)
	}
	got.Reset()
	if err := r.ReadObjectFrom(context.Background(), sum, 300_000, &got); err != nil || !bytes.Equal(got.Bytes(), data[300_000:]) {
		t.Errorf("from 300000: %d bytes (%v), want the object's last %d", got.Len(), err, len(data)-300_000)
	}
	h := sha256.Sum256(data)
	if err := r.CheckObject(sum, h[:]); err != nil {
		t.Errorf("CheckObject of the right hash: %v", err)
	}
	h[0] ^= 1
	if err := r.CheckObject(sum, h[:]); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), r.loc.ObjectKey(sum)) {
		t.Errorf("CheckObject of a wrong hash = %v, want ErrCorrupt naming %s", err, r.loc.ObjectKey(sum))
	}
}

// TestReadObjectFromStalled: a response that stops bringing bytes (a
// stalled server) is given up after idleTimeout and asked again from
// where it stopped.
func TestReadObjectFromStalled(t *testing.T) {
	ct := &cutTransport{cut: 300_000, stall: true, cutOff: map[string]bool{}}
	testTransport = ct
	old := idleTimeout
	idleTimeout = 200 * time.Millisecond
	t.Cleanup(func() { testTransport, idleTimeout = nil, old })
	_, r := openTest(t)
	data := bigData(1 << 20)
	ups := uploads(t, fileObject(t, t.TempDir(), "big", data))
	if _, err := r.Push(context.Background(), ups, nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := r.ReadObjectFrom(context.Background(), ups[0].Sum, 0, &got); err != nil {
		t.Fatalf("ReadObjectFrom of a response that stalls: %v", err)
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Errorf("read %d bytes, not the object's %d", got.Len(), len(data))
	}
	if want := []string{"", "bytes=300000-"}; !slices.Equal(ct.ranges, want) {
		t.Errorf("GETs with ranges %q, want %q", ct.ranges, want)
	}
}
