package app

import (
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v4"
)

// The files the setup flow writes in the data directory, mode 0600.
const (
	// AppCredentialsFile holds the App's ID, slug, name, client ID and
	// secret, and webhook secret, and names the file of its private key
	// (JSON). Its presence is what says "configured".
	AppCredentialsFile = "github-app.json"
	// AppPrivateKeyFile is where earlier versions of baton kept the App's
	// private key (PEM); credentials naming it are still read. The key is
	// now kept in a file named for the App (AppPrivateKeyFileOf).
	AppPrivateKeyFile = "github-app.pem"
)

// AppPrivateKeyFileOf is the file, in the data directory, of App appID's
// private key (PEM): "github-app-<appID>.pem". Naming it for the App
// keeps the stored ID and key of one App even when a crash ends a store
// between the key and the credentials, which are written last.
func AppPrivateKeyFileOf(appID int64) string {
	return "github-app-" + strconv.FormatInt(appID, 10) + ".pem"
}

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
	if err := CheckAppPrivateKey(creds.PrivateKey); err != nil {
		return AppCredentials{}, false, fmt.Errorf("app: %s: %w", keyPath, err)
	}
	return creds, true, nil
}

// CheckAppPrivateKey refuses a private key that is not what GitHub gives
// an App: an RSA private key in PEM form (PKCS #1, as GitHub hands them
// out, or PKCS #8), parsed as the executor's JWT signer will parse it.
// Nothing of the key is shown.
func CheckAppPrivateKey(pemBytes []byte) error {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return errors.New("not a PEM file (GitHub gives an App's private key as a .pem file)")
	}
	if _, err := jwt.ParseRSAPrivateKeyFromPEM(pemBytes); err != nil {
		return fmt.Errorf("not an RSA private key (its PEM block is %q; a GitHub App's key is RSA)", block.Type)
	}
	return nil
}

// storeAppCredentials writes the key to the App's own file
// (AppPrivateKeyFileOf), then the credentials naming it (their presence is
// what says "configured"), each through a temporary file synced and
// renamed, mode 0600: whenever it stops, AppCredentialsFile names an App
// and that App's key. The key file of the credentials it replaces is
// removed once they are. Callers serialise their stores.
func storeAppCredentials(dataDir string, c AppCredentials) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("app: create %s: %w", dataDir, err)
	}
	previous := storedPrivateKeyFile(dataDir)
	c.PrivateKeyFile = AppPrivateKeyFileOf(c.AppID)
	if err := writeSecretFile(filepath.Join(dataDir, c.PrivateKeyFile), c.PrivateKey); err != nil {
		return err
	}
	syncDir(dataDir) // the key's rename before the credentials naming it
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := writeSecretFile(filepath.Join(dataDir, AppCredentialsFile), append(b, '\n')); err != nil {
		return err
	}
	syncDir(dataDir)
	if previous != "" && previous != c.PrivateKeyFile {
		_ = os.Remove(filepath.Join(dataDir, previous)) // the replaced App's key
	}
	return nil
}

// storedPrivateKeyFile returns the key file the stored credentials name,
// when it is one the setup flow wrote in dataDir; "" otherwise.
func storedPrivateKeyFile(dataDir string) string {
	b, err := os.ReadFile(filepath.Join(dataDir, AppCredentialsFile))
	if err != nil {
		return ""
	}
	var c AppCredentials
	if json.Unmarshal(b, &c) != nil {
		return ""
	}
	if c.PrivateKeyFile == AppPrivateKeyFile || (c.AppID > 0 && c.PrivateKeyFile == AppPrivateKeyFileOf(c.AppID)) {
		return c.PrivateKeyFile
	}
	return ""
}

// syncDir makes the renames in dir durable, as far as the system allows.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// writeSecretFile writes path through a temporary file of its own (mode
// 0600) synced and renamed.
func writeSecretFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("app: write %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o600)
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
