package app

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// The files the setup flow writes in the data directory, both mode 0600.
const (
	// AppCredentialsFile holds the App's ID, slug, name, client ID and
	// secret, and webhook secret (JSON).
	AppCredentialsFile = "github-app.json"
	// AppPrivateKeyFile holds the App's private key (PEM).
	AppPrivateKeyFile = "github-app.pem"
)

// AppCredentials are what baton needs to run as a GitHub App, as the
// manifest conversion returned them. Keep them secret: the private key
// signs the App's JWTs, the webhook secret authenticates deliveries.
// String() leaves the secrets out.
type AppCredentials struct {
	AppID int64  `json:"appId"`
	Slug  string `json:"slug"`
	Name  string `json:"name"`
	// Owner is the login of the account that owns the App.
	Owner   string `json:"owner,omitempty"`
	HTMLURL string `json:"htmlUrl,omitempty"`
	// WebURL and APIURL are the GitHub the App lives on
	// (https://github.com and https://api.github.com/, or a GitHub
	// Enterprise Server's).
	WebURL        string    `json:"webUrl"`
	APIURL        string    `json:"apiUrl"`
	ClientID      string    `json:"clientId,omitempty"`
	ClientSecret  string    `json:"clientSecret,omitempty"`
	WebhookSecret string    `json:"webhookSecret"`
	CreatedAt     time.Time `json:"createdAt"`
	// PrivateKeyFile is the path of the PEM file, relative to the data
	// directory unless absolute.
	PrivateKeyFile string `json:"privateKeyFile"`
	// PrivateKey is the App's private key, PEM-encoded (read from
	// PrivateKeyFile).
	PrivateKey []byte `json:"-"`
}

// String describes the App without its secrets.
func (c AppCredentials) String() string {
	return "GitHub App " + strconv.Quote(c.Name) + " (ID " + strconv.FormatInt(c.AppID, 10) + ", slug " + c.Slug + ")"
}

// InstallURL is the page where people install the App.
func (c AppCredentials) InstallURL() string {
	return trimTrailingSlash(c.WebURL) + "/apps/" + c.Slug + "/installations/new"
}

// LoadAppCredentials reads the App credentials the setup flow stored in
// dataDir. ok is false (and err nil) when there are none.
func LoadAppCredentials(dataDir string) (creds AppCredentials, ok bool, err error) {
	path := filepath.Join(dataDir, AppCredentialsFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return AppCredentials{}, false, nil
	}
	if err != nil {
		return AppCredentials{}, false, fmt.Errorf("app: read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &creds); err != nil {
		return AppCredentials{}, false, fmt.Errorf("app: %s: %w", path, err)
	}
	if creds.AppID <= 0 || creds.WebhookSecret == "" || creds.PrivateKeyFile == "" {
		return AppCredentials{}, false, fmt.Errorf("app: %s: appId, webhookSecret and privateKeyFile are required", path)
	}
	keyPath := creds.PrivateKeyFile
	if !filepath.IsAbs(keyPath) {
		keyPath = filepath.Join(dataDir, keyPath)
	}
	if creds.PrivateKey, err = os.ReadFile(keyPath); err != nil {
		return AppCredentials{}, false, fmt.Errorf("app: read the App's private key: %w", err)
	}
	if err := checkAppPrivateKey(creds.PrivateKey); err != nil {
		return AppCredentials{}, false, fmt.Errorf("app: %s: %w", keyPath, err)
	}
	return creds, true, nil
}

// checkAppPrivateKey checks that pemBytes holds an RSA private key (PKCS #1,
// as GitHub hands them out, or PKCS #8).
func checkAppPrivateKey(pemBytes []byte) error {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return errors.New("no PEM block in the private key")
	}
	if _, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return nil
	}
	if _, err := x509.ParsePKCS8PrivateKey(block.Bytes); err != nil {
		return errors.New("the private key is not an RSA key in PKCS #1 or PKCS #8")
	}
	return nil
}

// storeAppCredentials writes the key, then the credentials (their
// presence is what says "configured"), each through a temporary file
// synced and renamed, mode 0600.
func storeAppCredentials(dataDir string, c AppCredentials) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("app: create %s: %w", dataDir, err)
	}
	c.PrivateKeyFile = AppPrivateKeyFile
	if err := writeSecretFile(filepath.Join(dataDir, AppPrivateKeyFile), c.PrivateKey); err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := writeSecretFile(filepath.Join(dataDir, AppCredentialsFile), append(b, '\n')); err != nil {
		return err
	}
	if d, err := os.Open(dataDir); err == nil {
		_ = d.Sync() // make the renames durable
		d.Close()
	}
	return nil
}

func writeSecretFile(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("app: write %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o600) // whatever mode a leftover temporary file had
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("app: write %s: %w", path, err)
	}
	return nil
}
