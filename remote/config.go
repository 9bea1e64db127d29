package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// Config says where a remote is and how to reach it: what `agentfs
// remote add` records.
type Config struct {
	Name     string `json:"name"`
	URL      string `json:"url"`                // s3://BUCKET/PREFIX
	Endpoint string `json:"endpoint,omitempty"` // http(s)://host[:port] of an S3-compatible store; "" for AWS S3
	Region   string `json:"region,omitempty"`
	Profile  string `json:"profile,omitempty"` // the profile of ~/.aws/credentials
}

// Location is a bucket and a key prefix.
type Location struct {
	Bucket string
	Prefix string // "" or a prefix without a leading or trailing "/"
}

func (l Location) String() string {
	if l.Prefix == "" {
		return "s3://" + l.Bucket
	}
	return "s3://" + l.Bucket + "/" + l.Prefix
}

// ParseURL reads s3://BUCKET[/PREFIX].
func ParseURL(s string) (Location, error) {
	rest, ok := strings.CutPrefix(s, "s3://")
	if !ok {
		return Location{}, fmt.Errorf("remote URL %q: want s3://BUCKET/PREFIX", s)
	}
	bucket, prefix, _ := strings.Cut(rest, "/")
	if err := s3utils.CheckValidBucketNameStrict(bucket); err != nil {
		return Location{}, fmt.Errorf("remote URL %q: bucket name %q: %v", s, bucket, err)
	}
	prefix = strings.Trim(prefix, "/")
	for _, c := range strings.Split(prefix, "/") {
		if prefix != "" && (c == "" || c == "." || c == "..") {
			return Location{}, fmt.Errorf("remote URL %q: the prefix %q has an empty, . or .. component", s, prefix)
		}
	}
	return Location{Bucket: bucket, Prefix: prefix}, nil
}

// endpointOf returns the host, whether to use TLS, and whether the
// endpoint is a custom one (addressed path-style).
func endpointOf(cfg Config) (host string, secure, custom bool, err error) {
	ep := cfg.Endpoint
	if ep == "" {
		ep = os.Getenv("AWS_ENDPOINT_URL_S3")
	}
	if ep == "" {
		ep = os.Getenv("AWS_ENDPOINT_URL")
	}
	if ep == "" {
		return "s3.amazonaws.com", true, false, nil
	}
	u, err := url.Parse(ep)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return "", false, false, fmt.Errorf("endpoint %q: want http://HOST[:PORT] or https://HOST[:PORT]", ep)
	}
	return u.Host, u.Scheme == "https", true, nil
}

// Credentials sign the requests to a remote.
type Credentials struct {
	AccessKey    string
	SecretKey    string
	SessionToken string
}

// ResolveCredentials returns the credentials for cfg the AWS way (see
// the package doc), or ErrNoCredentials.
func ResolveCredentials(cfg Config) (Credentials, error) {
	var chain []credentials.Provider
	if cfg.Profile == "" {
		chain = append(chain, &credentials.EnvAWS{})
	}
	chain = append(chain, &credentials.FileAWSCredentials{Profile: cfg.Profile})
	for _, p := range chain {
		v, err := p.RetrieveWithCredContext(&credentials.CredContext{Client: http.DefaultClient})
		if err == nil && v.AccessKeyID != "" && v.SecretAccessKey != "" {
			return Credentials{AccessKey: v.AccessKeyID, SecretKey: v.SecretAccessKey, SessionToken: v.SessionToken}, nil
		}
	}
	if cfg.Profile != "" {
		return Credentials{}, fmt.Errorf("%w: the profile %q has none in ~/.aws/credentials or ~/.aws/config (AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE): add it (aws configure --profile %s) or name another",
			ErrNoCredentials, cfg.Profile, cfg.Profile)
	}
	return Credentials{}, fmt.Errorf("%w: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile in ~/.aws/credentials (AWS_PROFILE, or the remote's --profile)", ErrNoCredentials)
}

// Remote is a remote opened for transfers.
type Remote struct {
	cfg      Config
	loc      Location
	endpoint string // for messages: the URL of the store
	client   *minio.Client
}

// Open makes a client for the remote cfg describes, with the
// credentials found the AWS way. It sends no request: Check does.
func Open(cfg Config) (*Remote, error) {
	if _, err := ParseURL(cfg.URL); err != nil {
		return nil, err
	}
	if _, _, _, err := endpointOf(cfg); err != nil {
		return nil, err
	}
	creds, err := ResolveCredentials(cfg)
	if err != nil {
		return nil, err
	}
	return OpenWith(cfg, creds)
}

// OpenWith makes a client for the remote cfg describes that signs with
// creds (cfg.Profile is not read).
func OpenWith(cfg Config, creds Credentials) (*Remote, error) {
	loc, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	host, secure, custom, err := endpointOf(cfg)
	if err != nil {
		return nil, err
	}
	region := cfg.Region
	if region == "" {
		region = os.Getenv("AWS_REGION")
	}
	if region == "" {
		region = os.Getenv("AWS_DEFAULT_REGION")
	}
	lookup := minio.BucketLookupAuto
	if custom {
		lookup = minio.BucketLookupPath
	}
	c, err := minio.New(host, &minio.Options{
		Creds:        credentials.NewStaticV4(creds.AccessKey, creds.SecretKey, creds.SessionToken),
		Secure:       secure,
		Region:       region,
		BucketLookup: lookup,
		MaxRetries:   requestRetries,
		Transport:    testTransport,
	})
	if err != nil {
		return nil, fmt.Errorf("remote %s: %v", cfg.Name, err)
	}
	scheme := "http://"
	if secure {
		scheme = "https://"
	}
	return &Remote{cfg: cfg, loc: loc, endpoint: scheme + host, client: c}, nil
}

// testTransport, when not nil, carries the client's requests: the tests
// put faults between the client and a real server with it.
var testTransport http.RoundTripper

// requestRetries is how often minio-go sends one request before it gives
// up, waiting longer each time (exponential backoff with jitter).
const requestRetries = 5

// Location returns where the remote is.
func (r *Remote) Location() Location { return r.loc }

// Check asks the store whether the bucket exists, and so whether the
// credentials are accepted: ErrNoBucket, ErrCredentials, or an error
// that names the endpoint.
func (r *Remote) Check(ctx context.Context) error {
	ok, err := r.client.BucketExists(ctx, r.loc.Bucket)
	if err != nil {
		return r.explain(err, "")
	}
	if !ok {
		return r.explain(minio.ErrorResponse{Code: "NoSuchBucket", BucketName: r.loc.Bucket}, "")
	}
	return nil
}

// Name returns the remote's name (its Config's).
func (r *Remote) Name() string { return r.cfg.Name }

// describe names the remote in messages: NAME (s3://…) at ENDPOINT.
func (r *Remote) describe() string {
	s := r.loc.String()
	if r.cfg.Name != "" {
		s = r.cfg.Name + " (" + s + ")"
	}
	return s + " at " + r.endpoint
}

// explain turns an error of the client into one of this package's,
// saying what to fix; key is the object concerned, or "".
func (r *Remote) explain(err error, key string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	resp := minio.ToErrorResponse(err)
	what := r.describe()
	if key != "" {
		what = fmt.Sprintf("%s of %s", key, what)
	}
	switch resp.Code {
	case "NoSuchBucket":
		return fmt.Errorf("%w: %s: the bucket %q does not exist: create it (aws s3 mb s3://%s) or give the remote another URL",
			ErrNoBucket, r.describe(), r.loc.Bucket, r.loc.Bucket)
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken", "ExpiredToken",
		"XAdminUserNotFound": // versitygw's word for an unknown access key
		return fmt.Errorf("%w: %s refused the credentials (%s: %s): check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or the profile (--profile, AWS_PROFILE), and that they may use the bucket",
			ErrCredentials, r.describe(), resp.Code, resp.Message)
	case "NoSuchKey", "NotFound":
		return fmt.Errorf("%w: %s", ErrNotFound, what)
	}
	if resp.Code != "" {
		return fmt.Errorf("%s: %s: %s", what, resp.Code, resp.Message)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// The errors that retrying cannot mend.
var (
	ErrNoBucket      = errors.New("no such bucket")
	ErrCredentials   = errors.New("credentials refused")
	ErrNoCredentials = errors.New("no credentials")
	ErrNotFound      = errors.New("not in the remote")
	ErrCorrupt       = errors.New("corrupt object")
)

// permanent reports whether err is one that retrying cannot mend.
func permanent(err error) bool {
	return errors.Is(err, ErrNoBucket) || errors.Is(err, ErrCredentials) || errors.Is(err, ErrNoCredentials) ||
		errors.Is(err, ErrNotFound) || errors.Is(err, ErrCorrupt) || errors.Is(err, errChanged) || errors.Is(err, errNoSpace) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
