package s3test

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// TestServerServesAndLogs starts a gateway, puts and gets an object
// through a real S3 client, and checks what the server's side shows: the
// file in the served directory and the requests in the access log.
func TestServerServesAndLogs(t *testing.T) {
	s := Start(t, "bkt")
	c, err := minio.New(strings.TrimPrefix(s.Endpoint, "http://"), &minio.Options{
		Creds:        credentials.NewStaticV4(AccessKey, SecretKey, ""),
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	data := []byte("hello, remote")
	if _, err := c.PutObject(ctx, "bkt", "dir/obj", bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatalf("put: %v", err)
	}
	o, err := c.GetObject(ctx, "bkt", "dir/obj", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(o)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("got %q, want %q", got, data)
	}
	onDisk, err := os.ReadFile(s.ObjectFile("bkt", "dir/obj"))
	if err != nil || !bytes.Equal(onDisk, data) {
		t.Errorf("server's file = %q, %v; want %q", onDisk, err, data)
	}
	if keys := s.Objects(t, "bkt", ""); len(keys) != 1 || keys[0] != "dir/obj" {
		t.Errorf("Objects = %q, want [dir/obj]", keys)
	}
	if n := s.Requests(t, "PutObject", "dir/"); n != 1 {
		t.Errorf("PutObject requests under dir/ = %d, want 1", n)
	}
	if n := s.Requests(t, "PutObject", "other/"); n != 0 {
		t.Errorf("PutObject requests under other/ = %d, want 0", n)
	}
	if n := s.Requests(t, "GetObject", "dir/obj"); n != 1 {
		t.Errorf("GetObject requests = %d, want 1", n)
	}
}

// TestParseAccessLine reads lines as versitygw v1.8.0 writes them.
func TestParseAccessLine(t *testing.T) {
	line := `ak bkt [28/November/2026:05:42:32 +0000] 127.0.0.1 ak G6XL8RVXGK3TDZSJ s3_PutObject dir/obj /bkt/dir/obj 200 - 0 13 4 4 - MinIO (linux; amd64) minio-go/v7.4.1 - x= SigV4 - AuthHeader s3.us-east-1.amazonaws.com - arn:aws:s3:::/bkt/dir/obj Yes`
	e, ok := parseAccessLine(line)
	if !ok || e.op != "PutObject" || e.key != "dir/obj" || e.status != 200 {
		t.Errorf("parseAccessLine = %+v, %v; want PutObject dir/obj 200", e, ok)
	}
	line = `- - [28/November/2026:05:41:12 +0000] 127.0.0.1 - 59GPBRXN33GHR7T7 s3_ListAllMyBuckets - / 403 AccessDenied 0 0 0 0 - curl/7.88.1 -`
	e, ok = parseAccessLine(line)
	if !ok || e.op != "ListAllMyBuckets" || e.key != "" || e.status != 403 {
		t.Errorf("parseAccessLine = %+v, %v; want ListAllMyBuckets '' 403", e, ok)
	}
}
