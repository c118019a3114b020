// Package taskbroker connects to a taskbroker broker: NewClient opens one gRPC connection with
// the options a real cluster needs (a bearer token, TLS with a private CA, a client certificate
// for mTLS). The generated stubs are in taskbrokerv1, the worker runtime in worker, the rich
// error details in rpcerr.
//
//	conn, err := taskbroker.NewClient("broker:50051",
//		taskbroker.WithToken(os.Getenv("TASKBROKER_TOKEN")),
//		taskbroker.WithTLSFiles("ca.pem", "client.pem", "client.key"))
//	broker := taskbrokerv1.NewBrokerServiceClient(conn)
package taskbroker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// Option configures NewClient.
type Option func(*options) error

type options struct {
	token string
	tls   *tls.Config
	extra []grpc.DialOption
}

// WithToken sends "authorization: Bearer token" on every call. An empty token sends nothing.
func WithToken(token string) Option {
	return func(o *options) error { o.token = token; return nil }
}

// WithTLS turns TLS on with cfg (nil: the system roots).
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) error {
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		o.tls = cfg
		return nil
	}
}

// WithTLSFiles turns TLS on, trusting the PEM CA in caFile (empty: the system roots) and, when
// certFile and keyFile are given, presenting that client certificate (mTLS).
func WithTLSFiles(caFile, certFile, keyFile string) Option {
	return func(o *options) error {
		cfg, err := TLSConfigFromFiles(caFile, certFile, keyFile)
		if err != nil {
			return err
		}
		o.tls = cfg
		return nil
	}
}

// WithDialOptions passes extra grpc.DialOptions (interceptors, a stats handler for tracing).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) error { o.extra = append(o.extra, opts...); return nil }
}

// FromEnv applies the standard environment (docs/client-spec.md, point 8): TASKBROKER_TOKEN,
// TASKBROKER_CA (turns TLS on), TASKBROKER_CLIENT_CERT and TASKBROKER_CLIENT_KEY (mTLS).
func FromEnv() Option {
	return func(o *options) error {
		o.token = os.Getenv("TASKBROKER_TOKEN")
		ca, cert, key := os.Getenv("TASKBROKER_CA"), os.Getenv("TASKBROKER_CLIENT_CERT"), os.Getenv("TASKBROKER_CLIENT_KEY")
		if ca == "" && cert == "" && key == "" {
			return nil
		}
		return WithTLSFiles(ca, cert, key)(o)
	}
}

// TLSConfigFromFiles builds a client TLS configuration from PEM files; see WithTLSFiles.
func TLSConfigFromFiles(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("taskbroker: CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("taskbroker: CA file %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("taskbroker: give both a client certificate and its key, or neither")
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("taskbroker: client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// NewClient opens a connection to target (host:port) with opts. Without WithTLS the connection
// is plaintext (a loopback broker, or a mesh that encrypts for you). Every call carries the
// caller's W3C trace context, and Submit writes it into each task's metadata.
func NewClient(target string, opts ...Option) (*grpc.ClientConn, error) {
	var o options
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	transport := insecure.NewCredentials()
	if o.tls != nil {
		transport = credentials.NewTLS(o.tls)
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(transport),
		// Leases long-poll for up to a minute: keep the idle connection checked and alive.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, PermitWithoutStream: true}),
		// W3C trace context on every call and in every submitted task (spec point 7).
		grpc.WithChainUnaryInterceptor(traceUnary),
	}
	if o.token != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer{token: o.token}))
	}
	return grpc.NewClient(target, append(dial, o.extra...)...)
}

// bearer sends the token on every call. It does not require transport security, so a token
// also works on plaintext inside a mesh that encrypts between pods.
type bearer struct{ token string }

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return false }
