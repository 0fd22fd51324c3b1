package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Authority is a certificate authority that issues byzlog's certificates
// in a localnet: ECDSA P-256, valid for a year.
type Authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

const validity = 365 * 24 * time.Hour

// NewAuthority makes a self-signed CA named name.
func NewAuthority(name string) (*Authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name, Organization: []string{"byzlog"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Authority{cert: cert, key: key}, nil
}

// LoadAuthority reads a CA written by WriteFiles.
func LoadAuthority(certFile, keyFile string) (*Authority, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load CA %s: %w", certFile, err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !cert.IsCA {
		return nil, fmt.Errorf("%s is not a byzlog CA (an ECDSA CA certificate)", certFile)
	}
	return &Authority{cert: cert, key: key}, nil
}

// CertPEM is the CA's certificate.
func (a *Authority) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.cert.Raw})
}

// Issue makes a certificate for name, valid for the hosts given (IP
// addresses or DNS names) as a server and as a client, and returns it and
// its key in PEM.
func (a *Authority) Issue(name string, hosts ...string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name, Organization: []string{"byzlog"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, nil, err
	}
	k, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: k}), nil
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// Local is a localnet's TLS material in one directory: ca.pem (with
// ca-key.pem), and a certificate and key per party, NAME.pem and
// NAME-key.pem.
type Local struct{ Dir string }

// CA is the path of the CA certificate.
func (l Local) CA() string { return filepath.Join(l.Dir, "ca.pem") }

// Party is the Files of a party of the localnet: its certificate and key,
// and the CA (which a server uses for mutual TLS only if told to).
func (l Local) Party(name string) Files {
	return Files{CA: l.CA(), Cert: filepath.Join(l.Dir, name+".pem"), Key: filepath.Join(l.Dir, name+"-key.pem")}
}

// Ensure makes the directory's CA, when there is none, and a certificate
// for each party that has none, valid for hosts. It keeps what exists, so
// a localnet restarted keeps its certificates, and clients their CA.
func (l Local) Ensure(hosts []string, parties ...string) error {
	if err := os.MkdirAll(l.Dir, 0o700); err != nil {
		return err
	}
	caKey := filepath.Join(l.Dir, "ca-key.pem")
	var ca *Authority
	if _, err := os.Stat(l.CA()); errors.Is(err, os.ErrNotExist) {
		if ca, err = NewAuthority("byzlog localnet CA"); err != nil {
			return err
		}
		k, err := x509.MarshalECPrivateKey(ca.key)
		if err != nil {
			return err
		}
		if err := os.WriteFile(caKey, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: k}), 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(l.CA(), ca.CertPEM(), 0o644); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	for _, p := range parties {
		f := l.Party(p)
		if _, err := os.Stat(f.Cert); err == nil {
			continue
		}
		if ca == nil {
			var err error
			if ca, err = LoadAuthority(l.CA(), caKey); err != nil {
				return err
			}
		}
		cert, key, err := ca.Issue(p, hosts...)
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.Key, key, 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(f.Cert, cert, 0o644); err != nil {
			return err
		}
	}
	return nil
}
