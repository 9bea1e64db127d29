package remote

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/internal/s3test"
	"github.com/agentfs/agentfs/internal/testenv"
)

const bucket = "agent-runs"

// setCredentials gives the test the server's credentials through the
// environment, as a user's shell would, and no AWS files of the
// machine's.
func setCredentials(t *testing.T, access, secret string) {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "no-credentials"))
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "no-config"))
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
}

// openTest starts a server with the bucket and opens the remote
// s3://agent-runs/team on it.
func openTest(t *testing.T) (*s3test.Server, *Remote) {
	t.Helper()
	srv := s3test.Start(t, bucket)
	setCredentials(t, s3test.AccessKey, s3test.SecretKey)
	r, err := Open(Config{Name: "team", URL: "s3://" + bucket + "/team", Endpoint: srv.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	return srv, r
}

// fileObject writes data to a file in dir and returns it as an Object.
func fileObject(t *testing.T, dir, name string, data []byte) Object {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return Object{Name: name, Open: func() (*os.File, error) { return os.Open(p) }}
}

// uploads hashes objs and pairs them with their sums.
func uploads(t *testing.T, objs ...Object) []Upload {
	t.Helper()
	sums, err := HashAll(context.Background(), objs, nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	ups := make([]Upload, len(objs))
	for i := range objs {
		ups[i] = Upload{Sum: sums[i], Object: objs[i]}
	}
	return ups
}

// objectKeys returns the keys the server holds for these sums.
func objectKeys(r *Remote, sums ...Sum) []string {
	var keys []string
	for _, s := range sums {
		keys = append(keys, r.loc.ObjectKey(s))
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// bigData returns n bytes that are not all alike.
func bigData(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/4093)
	}
	return b
}

type snapDoc struct {
	ID    string   `json:"id"`
	Files []string `json:"files"`
}

func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Location
		err  string
	}{
		{in: "s3://agent-runs/acme", want: Location{Bucket: "agent-runs", Prefix: "acme"}},
		{in: "s3://agent-runs/acme/ci/", want: Location{Bucket: "agent-runs", Prefix: "acme/ci"}},
		{in: "s3://agent-runs", want: Location{Bucket: "agent-runs"}},
		{in: "https://agent-runs/acme", err: "want s3://"},
		{in: "s3://Bad_Bucket/x", err: "bucket name"},
		{in: "s3://agent-runs/a//b", err: "empty, . or .."},
		{in: "s3://agent-runs/a/../b", err: "empty, . or .."},
	} {
		got, err := ParseURL(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseURL(%q) = %v, %v; want an error with %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if got.String() != strings.TrimSuffix(c.in, "/") {
			t.Errorf("%+v.String() = %q, want %q", got, got.String(), strings.TrimSuffix(c.in, "/"))
		}
	}
}

// TestPushFetch pushes files (two alike, one empty, one above the
// multipart threshold) and a document, checks what the server holds,
// and fetches everything back into another directory.
func TestPushFetch(t *testing.T) {
	srv, r := openTest(t)
	ctx := context.Background()
	dir := t.TempDir()
	big := bigData(int(MultipartThreshold + 3*PartSize/2))
	objs := []Object{
		fileObject(t, dir, "a", []byte("alpha\n")),
		fileObject(t, dir, "a-again", []byte("alpha\n")),
		fileObject(t, dir, "empty", nil),
		fileObject(t, dir, "big", big),
	}
	ups := uploads(t, objs...)
	doc := snapDoc{ID: "0badcafe", Files: []string{"a", "a-again", "empty", "big"}}
	st, err := r.Push(ctx, ups, []Doc{{Kind: KindSnapshot, Name: doc.ID, Value: doc}}, 0, nil)
	if err != nil {
		t.Fatalf("Push: %v", err)
	}
	want := PushStats{Objects: 3, Sent: 3, SentBytes: int64(6 + len(big)), Docs: 1, Parts: PartStats{Sent: 6}}
	if st != want {
		t.Errorf("Push stats = %+v, want %+v", st, want)
	}
	gotKeys := srv.Objects(t, bucket, "team/objects/")
	wantKeys := objectKeys(r, ups[0].Sum, ups[2].Sum, ups[3].Sum)
	if !slices.Equal(gotKeys, wantKeys) {
		t.Errorf("server holds %q, want %q", gotKeys, wantKeys)
	}
	if n := srv.Requests(t, "UploadPart", "team/objects/"); n < 2 {
		t.Errorf("server saw %d UploadPart requests, want the big object in parts", n)
	}
	onServer, err := os.ReadFile(srv.ObjectFile(bucket, r.loc.ObjectKey(ups[3].Sum)))
	if err != nil || !bytes.Equal(onServer, big) {
		t.Errorf("the server's copy of the big object differs (%d bytes, %v)", len(onServer), err)
	}
	if _, err := os.Stat(srv.ObjectFile(bucket, "team/agentfs-remote.json")); err != nil {
		t.Errorf("no marker: %v", err)
	}

	var got snapDoc
	if err := r.GetDoc(ctx, KindSnapshot, doc.ID, &got); err != nil || got.ID != doc.ID || !slices.Equal(got.Files, doc.Files) {
		t.Errorf("GetDoc = %+v, %v; want %+v", got, err, doc)
	}
	names, err := r.ListDocs(ctx, KindSnapshot)
	if err != nil || !slices.Equal(names, []string{doc.ID}) {
		t.Errorf("ListDocs = %q, %v; want [%s]", names, err, doc.ID)
	}
	if err := r.GetDoc(ctx, KindSession, "nope", &got); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetDoc of a missing document = %v, want ErrNotFound", err)
	}

	out := t.TempDir()
	var sums []Sum
	for _, u := range ups {
		sums = append(sums, u.Sum)
	}
	fst, err := r.Fetch(ctx, sums, out, 0, nil)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if fst.Fetched != 3 || fst.FetchedBytes != int64(6+len(big)) {
		t.Errorf("Fetch stats = %+v, want 3 objects of %d bytes", fst, 6+len(big))
	}
	for i, u := range ups {
		b, err := os.ReadFile(ObjectPath(out, u.Sum))
		f, _ := objs[i].Open()
		wantB, _ := readAll(f)
		if err != nil || !bytes.Equal(b, wantB) {
			t.Errorf("fetched %s: %d bytes (%v), want %d", objs[i].Name, len(b), err, len(wantB))
		}
	}
	// Fetching again finds everything there.
	fst, err = r.Fetch(ctx, sums, out, 0, nil)
	if err != nil || fst.Fetched != 0 || fst.Skipped != 3 {
		t.Errorf("second Fetch = %+v, %v; want 3 skipped", fst, err)
	}
}

func readAll(f *os.File) ([]byte, error) {
	defer func() { _ = f.Close() }()
	var b bytes.Buffer
	_, err := b.ReadFrom(f)
	return b.Bytes(), err
}

// TestPushSendsOnlyWhatTheRemoteLacks pushes two snapshots that share
// objects and counts, from the server's access log, the objects the
// second push uploaded; with more objects than headLimit, the remote is
// asked by listing shards.
func TestPushSendsOnlyWhatTheRemoteLacks(t *testing.T) {
	for _, n := range []int{3, headLimit + 40} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			srv, r := openTest(t)
			ctx := context.Background()
			dir := t.TempDir()
			var base []Object
			for i := range n {
				base = append(base, fileObject(t, dir, fmt.Sprintf("f%d", i), fmt.Appendf(nil, "file %d\n", i)))
			}
			if _, err := r.Push(ctx, uploads(t, base...), nil, 0, nil); err != nil {
				t.Fatal(err)
			}
			before := srv.Requests(t, "PutObject", "team/objects/")
			if before != n {
				t.Fatalf("first push: the server stored %d objects, want %d", before, n)
			}
			changed := append(slices.Clone(base[1:]), fileObject(t, dir, "new", []byte("new\n")), fileObject(t, dir, "f0", []byte("changed\n")))
			st, err := r.Push(ctx, uploads(t, changed...), nil, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			if sent := srv.Requests(t, "PutObject", "team/objects/") - before; sent != 2 {
				t.Errorf("second push: the server stored %d objects, want 2 (the new and the changed file)", sent)
			}
			if st.Sent != 2 || st.Skipped != n-1 {
				t.Errorf("second push stats = %+v, want 2 sent, %d skipped", st, n-1)
			}
		})
	}
}

// TestPushResumes interrupts a push after five of its objects arrived
// (the context is cancelled from the progress function; one object at a
// time, so that no upload is in flight then), checks that no document
// was written, then pushes again: only the objects that had not arrived
// are sent, and the documents are written.
func TestPushResumes(t *testing.T) {
	srv, r := openTest(t)
	dir := t.TempDir()
	var objs []Object
	for i := range 20 {
		objs = append(objs, fileObject(t, dir, fmt.Sprintf("f%d", i), bigData(100_000+i)))
	}
	ups := uploads(t, objs...)
	docs := []Doc{{Kind: KindSnapshot, Name: "0badcafe", Value: snapDoc{ID: "0badcafe"}}, {Kind: KindSession, Name: "s1", Value: map[string]string{"id": "s1"}}}
	ctx, cancel := context.WithCancel(context.Background())
	_, err := r.Push(ctx, ups, docs, 1, func(p Progress) {
		if p.Phase == PhaseUploading && p.ObjectsDone == 5 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted Push = %v, want context.Canceled", err)
	}
	arrived := len(srv.Objects(t, bucket, "team/objects/"))
	if arrived != 5 {
		t.Fatalf("%d objects arrived before the interruption, want 5", arrived)
	}
	if docs := srv.Objects(t, bucket, "team/snapshots/"); len(docs) != 0 {
		t.Errorf("an interrupted push wrote documents: %q", docs)
	}
	before := srv.Requests(t, "PutObject", "team/objects/")
	st, err := r.Push(context.Background(), ups, docs, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sent := srv.Requests(t, "PutObject", "team/objects/") - before; sent != 20-arrived || st.Sent != sent || st.Skipped != arrived {
		t.Errorf("the resumed push stored %d objects (stats %+v), want %d, skipping %d", sent, st, 20-arrived, arrived)
	}
	if got := srv.Objects(t, bucket, "team/sessions/"); len(got) != 1 {
		t.Errorf("session documents after the resumed push: %q, want one", got)
	}
}

// TestFetchRefusesCorruptObject damages an object on the server and
// checks that a fetch refuses it, names it, and leaves nothing under
// the object's name in the destination (nor a temporary file).
func TestFetchRefusesCorruptObject(t *testing.T) {
	for _, size := range []int{5, int(MultipartThreshold) + 1} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			srv, r := openTest(t)
			ctx := context.Background()
			ups := uploads(t, fileObject(t, t.TempDir(), "f", bigData(size)))
			if _, err := r.Push(ctx, ups, nil, 0, nil); err != nil {
				t.Fatal(err)
			}
			key := r.loc.ObjectKey(ups[0].Sum)
			f, err := os.OpenFile(srv.ObjectFile(bucket, key), os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte{'X'}, int64(size/2)); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			out := t.TempDir()
			_, err = r.Fetch(ctx, []Sum{ups[0].Sum}, out, 0, nil)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), key) {
				t.Errorf("Fetch of a damaged object = %v, want ErrCorrupt naming %s", err, key)
			}
			left, _ := filepath.Glob(filepath.Join(out, "*", "*"))
			hidden, _ := filepath.Glob(filepath.Join(out, "*", ".*"))
			if len(left)+len(hidden) != 0 {
				t.Errorf("a refused fetch left %q %q", left, hidden)
			}
		})
	}
}

// TestPushRefusesChangedObject gives Push a sum that the bytes do not
// hash to (as when a file changes between hashing and upload): the push
// fails naming the object, and the server keeps nothing under that sum.
func TestPushRefusesChangedObject(t *testing.T) {
	for _, size := range []int{5, int(MultipartThreshold) + 1} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			srv, r := openTest(t)
			o := fileObject(t, t.TempDir(), "moving", bigData(size))
			wrong := sha256.Sum256([]byte("what it held when it was hashed"))
			_, err := r.Push(context.Background(), []Upload{{Sum: wrong, Object: o}}, []Doc{{Kind: KindSnapshot, Name: "0badcafe", Value: 1}}, 0, nil)
			if err == nil || !strings.Contains(err.Error(), "moving") {
				t.Errorf("Push of a changed object = %v, want an error naming it", err)
			}
			if got := srv.Objects(t, bucket, "team/"); !slices.Equal(got, []string{"team/agentfs-remote.json"}) {
				t.Errorf("the server holds %q after a refused push, want only the marker", got)
			}
		})
	}
}

// TestBadInput: a missing bucket, refused credentials, no credentials,
// a bad endpoint, and a server that is not there.
func TestBadInput(t *testing.T) {
	srv := s3test.Start(t, bucket)
	ctx := context.Background()
	check := func(name string, cfg Config, want error, words ...string) {
		t.Helper()
		r, err := Open(cfg)
		if err == nil {
			err = r.Check(ctx)
		}
		if err == nil || (want != nil && !errors.Is(err, want)) {
			t.Errorf("%s: %v, want %v", name, err, want)
			return
		}
		for _, w := range words {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", name, err, w)
			}
		}
	}
	setCredentials(t, s3test.AccessKey, s3test.SecretKey)
	check("missing bucket", Config{Name: "team", URL: "s3://no-such-bucket/x", Endpoint: srv.Endpoint}, ErrNoBucket, "no-such-bucket", "aws s3 mb", srv.Endpoint)
	check("bad endpoint", Config{URL: "s3://" + bucket, Endpoint: "ftp://x"}, nil, "ftp://x", "http://HOST")
	check("bad URL", Config{URL: bucket}, nil, "s3://BUCKET")

	setCredentials(t, s3test.AccessKey, "wrong-secret")
	check("wrong secret", Config{URL: "s3://" + bucket, Endpoint: srv.Endpoint}, ErrCredentials, "AWS_SECRET_ACCESS_KEY")
	setCredentials(t, "nobody", "wrong-secret")
	check("unknown key", Config{URL: "s3://" + bucket, Endpoint: srv.Endpoint}, ErrCredentials)

	setCredentials(t, "", "")
	check("no credentials", Config{URL: "s3://" + bucket, Endpoint: srv.Endpoint}, ErrNoCredentials, "AWS_ACCESS_KEY_ID")
	check("unknown profile", Config{URL: "s3://" + bucket, Endpoint: srv.Endpoint, Profile: "ci"}, ErrNoCredentials, `"ci"`)
}

// TestCredentialsFromProfile reads the keys from a profile of a shared
// credentials file, named by the remote or by AWS_PROFILE, and the
// endpoint from AWS_ENDPOINT_URL.
func TestCredentialsFromProfile(t *testing.T) {
	srv := s3test.Start(t, bucket)
	setCredentials(t, "", "")
	creds := filepath.Join(t.TempDir(), "credentials")
	err := os.WriteFile(creds, fmt.Appendf(nil, "[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n[ci]\naws_access_key_id = %s\naws_secret_access_key = %s\n",
		s3test.AccessKey, s3test.SecretKey), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", creds)
	t.Setenv("AWS_ENDPOINT_URL", srv.Endpoint)
	r, err := Open(Config{URL: "s3://" + bucket + "/p", Profile: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Check(context.Background()); err != nil {
		t.Errorf("with --profile ci: %v", err)
	}
	r, err = Open(Config{URL: "s3://" + bucket + "/p"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Check(context.Background()); !errors.Is(err, ErrCredentials) {
		t.Errorf("with the default profile's wrong keys: %v, want ErrCredentials", err)
	}
	t.Setenv("AWS_PROFILE", "ci")
	r, err = Open(Config{URL: "s3://" + bucket + "/p"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Check(context.Background()); err != nil {
		t.Errorf("with AWS_PROFILE=ci: %v", err)
	}
}

// flakyTransport breaks the first upload of every object under
// team/objects/ half way through its body, as a connection reset does.
type flakyTransport struct {
	mu     sync.Mutex
	broken map[string]bool
	breaks int
}

func (f *flakyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/team/objects/") {
		f.mu.Lock()
		first := !f.broken[req.URL.Path]
		f.broken[req.URL.Path] = true
		if first {
			f.breaks++
		}
		f.mu.Unlock()
		if first {
			if req.Body != nil {
				_, _ = io.CopyN(io.Discard, req.Body, req.ContentLength/2)
				_ = req.Body.Close()
			}
			return nil, errors.New("connection reset by the test")
		}
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestPushRetries breaks the first upload of every object mid-body:
// the push still succeeds, each object is stored once, and the
// progress counts each byte once.
func TestPushRetries(t *testing.T) {
	ft := &flakyTransport{broken: map[string]bool{}}
	testTransport = ft
	t.Cleanup(func() { testTransport = nil })
	srv, r := openTest(t)
	dir := t.TempDir()
	var objs []Object
	var total int64
	for i := range 6 {
		b := bigData(200_000 + i)
		total += int64(len(b))
		objs = append(objs, fileObject(t, dir, fmt.Sprint(i), b))
	}
	var last Progress
	st, err := r.Push(context.Background(), uploads(t, objs...), nil, 3, func(p Progress) {
		if p.Phase == PhaseUploading {
			last = p
		}
	})
	if err != nil {
		t.Fatalf("Push through a flaky connection: %v", err)
	}
	if ft.breaks != 6 {
		t.Errorf("the transport broke %d uploads, want 6", ft.breaks)
	}
	if n := srv.Requests(t, "PutObject", "team/objects/"); n != 6 || st.Sent != 6 {
		t.Errorf("the server stored %d objects (stats %+v), want 6", n, st)
	}
	if last.BytesDone != total || last.Bytes != total || last.ObjectsDone != 6 {
		t.Errorf("last progress = %+v, want %d of %d bytes and 6 objects", last, total, total)
	}
}

// TestServerGone: a push to a server that has stopped fails, after
// retrying, with an error that names the endpoint, and writes nothing.
func TestServerGone(t *testing.T) {
	srv, r := openTest(t)
	srv.Stop()
	o := fileObject(t, t.TempDir(), "f", []byte("x"))
	_, err := r.Push(context.Background(), uploads(t, o), nil, 0, nil)
	if err == nil || !strings.Contains(err.Error(), srv.Endpoint) {
		t.Errorf("Push to a stopped server = %v, want an error naming %s", err, srv.Endpoint)
	}
}

// TestFetchIntoFullDisk fetches into a 1 MiB tmpfs an object that does
// not fit: the error says the disk is full and what to do, the fetch is
// not retried, and nothing is left under the object's name.
func TestFetchIntoFullDisk(t *testing.T) {
	testenv.RequireRoot(t, "mounting a small tmpfs")
	_, r := openTest(t)
	ups := uploads(t, fileObject(t, t.TempDir(), "big", bigData(3<<20)))
	if _, err := r.Push(context.Background(), ups, nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	_, err := r.Fetch(context.Background(), []Sum{ups[0].Sum}, dir, 0, nil)
	if err == nil || !strings.Contains(err.Error(), "is full") || strings.Contains(err.Error(), "tried") {
		t.Errorf("Fetch into a full disk = %v, want a full-disk error, not retried", err)
	}
	if _, err := os.Lstat(ObjectPath(dir, ups[0].Sum)); !os.IsNotExist(err) {
		t.Errorf("a failed fetch left its object: %v", err)
	}
}

// smallParts makes the multipart threshold and the part size small
// (5 MiB, the least S3 takes) for one test.
func smallParts(t *testing.T) {
	oldT, oldP := MultipartThreshold, PartSize
	MultipartThreshold, PartSize = 6<<20, 5<<20
	t.Cleanup(func() { MultipartThreshold, PartSize = oldT, oldP })
}

// TestPushResumesParts interrupts the multipart upload of one large
// object once two of its parts arrived, then pushes again: the parts
// the server holds are not sent again (counted from its access log),
// and what it completes is the object.
func TestPushResumesParts(t *testing.T) {
	smallParts(t)
	// One part at a time: none is in flight when the push is
	// interrupted, so the server holds exactly the parts it answered.
	old := partsInFlight
	partsInFlight = 1
	t.Cleanup(func() { partsInFlight = old })
	srv, r := openTest(t)
	data := bigData(int(8*PartSize + PartSize/2)) // 9 parts
	ups := uploads(t, fileObject(t, t.TempDir(), "big", data))
	ctx, cancel := context.WithCancel(context.Background())
	_, err := r.Push(ctx, ups, nil, 1, func(p Progress) {
		if p.Phase == PhaseUploading && p.BytesDone >= 2*PartSize {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted Push = %v, want context.Canceled", err)
	}
	if got := srv.Objects(t, bucket, "team/objects/"); len(got) != 0 {
		t.Fatalf("an interrupted multipart upload left objects %q", got)
	}
	st, err := r.Push(context.Background(), ups, nil, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Every part was stored once: those of the interrupted push (2)
	// were kept, and the resumed push sent only the others.
	if stored := srv.Requests(t, "UploadPart", "team/objects/"); stored != 9 || st.Parts.Kept != 2 || st.Parts.Sent != 7 {
		t.Errorf("the server stored %d parts over both pushes (resumed: %+v), want 9, at least 2 of them kept", stored, st.Parts)
	}
	onServer, err := os.ReadFile(srv.ObjectFile(bucket, r.loc.ObjectKey(ups[0].Sum)))
	if err != nil || !bytes.Equal(onServer, data) {
		t.Errorf("the server's copy of the resumed object differs (%d bytes, %v)", len(onServer), err)
	}
}

// TestPushResumedPartDiffers: a part the server holds from an
// interrupted upload whose bytes are not the object's (another upload
// of the key, a damaged part) is sent again, not kept.
func TestPushResumedPartDiffers(t *testing.T) {
	smallParts(t)
	srv, r := openTest(t)
	data := bigData(int(2*PartSize + 10))
	ups := uploads(t, fileObject(t, t.TempDir(), "big", data))
	key := r.loc.ObjectKey(ups[0].Sum)
	c := r.core()
	ctx := context.Background()
	id, err := c.NewMultipartUpload(ctx, bucket, key, minio.PutObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := bytes.Repeat([]byte{'x'}, int(PartSize))
	if _, err := c.PutObjectPart(ctx, bucket, key, id, 1, bytes.NewReader(other), int64(len(other)), minio.PutObjectPartOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := r.Push(ctx, ups, nil, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Parts.Sent != 3 || st.Parts.Kept != 0 {
		t.Errorf("push over a differing part: %+v, want 3 parts sent, none kept", st.Parts)
	}
	onServer, err := os.ReadFile(srv.ObjectFile(bucket, key))
	if err != nil || !bytes.Equal(onServer, data) {
		t.Errorf("the server's copy differs (%d bytes, %v)", len(onServer), err)
	}
}

// TestFetchResumes: a fetch finds the temporary file an interrupted
// fetch left (here, the first 3 MiB of the object) and asks the server
// only for the rest (its bytes counted from the access log); a
// temporary file that is not a prefix of the object is fetched again
// whole, and the result is the object either way.
func TestFetchResumes(t *testing.T) {
	srv, r := openTest(t)
	data := bigData(8 << 20)
	ups := uploads(t, fileObject(t, t.TempDir(), "big", data))
	ctx := context.Background()
	if _, err := r.Push(ctx, ups, nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	sum := ups[0].Sum
	for _, c := range []struct {
		name   string
		prefix []byte
		sent   int64 // bytes the server sends
		want   int64 // bytes the fetch counts (what it kept of them)
	}{
		{"prefix", data[:3<<20], int64(len(data) - 3<<20), int64(len(data) - 3<<20)},
		{"whole prefix", data, 0, 0},
		// Found out at the end: the rest, then the whole again.
		{"other bytes", bytes.Repeat([]byte{'y'}, 3<<20), int64(2*len(data) - 3<<20), int64(len(data))},
		{"longer", append(slices.Clone(data), 'z'), int64(len(data)), int64(len(data))},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			part := filepath.Join(filepath.Dir(ObjectPath(dir, sum)), ".fetch-"+sum.String())
			if err := os.MkdirAll(filepath.Dir(part), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(part, c.prefix, 0o600); err != nil {
				t.Fatal(err)
			}
			before := srv.BytesWritten(t)
			st, err := r.Fetch(ctx, []Sum{sum}, dir, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			// What the server wrote: the bytes asked for, and headers and
			// its access log's lines (less than 64 KiB).
			if sent := srv.BytesWritten(t) - before; sent < c.sent || sent > c.sent+64<<10 || st.FetchedBytes != c.want {
				t.Errorf("the server wrote %d bytes (stats %+v), want %d and its headers (%d counted)", sent, st, c.sent, c.want)
			}
			got, err := os.ReadFile(ObjectPath(dir, sum))
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("the fetched object differs (%d bytes, %v)", len(got), err)
			}
			if _, err := os.Lstat(part); !os.IsNotExist(err) {
				t.Errorf("the temporary file is left: %v", err)
			}
		})
	}
}

// TestFetchTogether: two fetches of one object into one directory at
// once (two pulls) both succeed, and leave the object whole and no
// temporary file.
func TestFetchTogether(t *testing.T) {
	_, r := openTest(t)
	data := bigData(4 << 20)
	ups := uploads(t, fileObject(t, t.TempDir(), "big", data))
	ctx := context.Background()
	if _, err := r.Push(ctx, ups, nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { _, errs[i] = r.Fetch(ctx, []Sum{ups[0].Sum}, dir, 0, nil) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("fetch %d: %v", i, err)
		}
	}
	if got, err := os.ReadFile(ObjectPath(dir, ups[0].Sum)); err != nil || !bytes.Equal(got, data) {
		t.Errorf("the object fetched differs (%d bytes, %v)", len(got), err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*", ".*")); len(left) != 0 {
		t.Errorf("temporary files left: %q", left)
	}
}
