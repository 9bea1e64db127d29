// Package remote keeps agentfs's sessions and snapshots in S3-compatible
// object storage (AWS S3, MinIO, Ceph RGW, SeaweedFS, Cloudflare R2,
// Versity's gateway): the layout of a remote in its bucket, the S3
// client (minio-go), and the transfers of objects and metadata
// documents between a machine and a remote. It knows nothing of stores,
// branches or the overlay: the control plane hands it objects to send
// (each one a way to open its bytes) and documents to publish, and asks
// it for objects to fetch into a directory.
//
// # Layout in the bucket
//
// A remote is a bucket and a key prefix, written s3://BUCKET/PREFIX.
// Below the prefix (docs/store-format.md, "Remotes", says the same for
// users who inspect a bucket with other tools):
//
//	PREFIX/agentfs-remote.json          the marker: {"format": 1}
//	PREFIX/objects/sha256/ab/ab01…ef    a file's bytes, named by the SHA-256 of the bytes (64 hex digits)
//	PREFIX/snapshots/ID.json            a snapshot's document: its entries, each file naming its object
//	PREFIX/compact/snapshots/ID.gob     the same in Go's gob encoding, written just before it, which names it (compact.go)
//	PREFIX/sessions/ID.json             a session's document: the record, its snapshots and branches
//
// Objects are content-addressed: identical contents are stored once,
// whichever session, machine or snapshot they come from, and a key names
// exactly one content forever, so an object is never rewritten and a
// push sends only the objects the remote lacks. Documents are small JSON
// files; every object a document names is in the remote before the
// document is written.
//
// # Transfers
//
// Push hashes the objects it is given (through a Hasher: by default by
// reading them), asks the remote which of those sums it lacks, uploads
// those (bounded parallelism; multipart with parallel parts above
// MultipartThreshold), and only then writes the documents, in the order
// given: a session document last, after the snapshots it names. An
// interrupted push is resumed by pushing again: what arrived is found
// and skipped, and of a large object that was under way, the parts the
// server holds (multipart.go); a document is never written before its
// objects, so a remote never holds a document that names a missing
// object. An interrupted fetch is resumed the same way: the objects
// fetched are kept, and the one under way continues from the bytes its
// temporary file holds (fetchObject).
//
// Integrity is checked on both ends. On the way up, the request's
// signature covers the body (SigV4 signs each chunk of a streamed body
// over plain HTTP, and the server checks it before it stores; over
// HTTPS, TLS does), and the uploader hashes the bytes it actually read
// and sent: an object whose bytes changed since they were hashed is
// removed from the remote again and the push fails, naming it. On the
// way down, a fetch hashes what it reads back (and what it kept of an
// interrupted fetch, read again) and refuses an object
// whose bytes do not hash to its name (ErrCorrupt, naming the key);
// what it writes goes to a temporary file that is fsync'ed and renamed
// into place only when complete and verified, so a crash mid-fetch
// leaves no half-written object under an object's name.
//
// Failures of the network or the server are retried with exponential
// backoff (minio-go retries each request; a transfer whose stream
// broke is started again whole), then reported. Errors that retrying
// cannot mend are not retried and say what to fix: ErrNoBucket,
// ErrCredentials, ErrNoCredentials, ErrCorrupt, ErrNotFound.
//
// # Credentials and endpoints
//
// The AWS way (Open): an explicit --profile reads that profile of the
// shared credentials and config files (AWS_SHARED_CREDENTIALS_FILE,
// AWS_CONFIG_FILE, else ~/.aws/credentials and ~/.aws/config);
// otherwise the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN) comes first, then the profile AWS_PROFILE (or
// "default") of those files. The region is --region, else AWS_REGION or
// AWS_DEFAULT_REGION, else asked of the bucket. The endpoint is
// --endpoint, else AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, else AWS S3;
// a custom endpoint is addressed path-style (http://host/bucket/key),
// as most S3-compatible stores need. The instance metadata service is
// never asked.
//
// # Concurrency
//
// A Remote is safe for concurrent use; it holds no lock of its own. A
// transfer runs its workers on goroutines it waits for before it
// returns, and calls the progress function from them, one call at a
// time.
package remote
