package queue

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/zap"
)

// StoreDir is the embedded server's JetStream directory inside the data
// directory.
func StoreDir(dataDir string) string { return filepath.Join(dataDir, "nats") }

// startServer runs nats-server in this process with JetStream storing under
// DataDir/nats. It listens on a socket only when Config.ListenAddr is set.
func startServer(cfg Config, log *zap.Logger) (*server.Server, error) {
	dir := StoreDir(cfg.DataDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("queue: embedded server store: %w", err)
	}
	if err := checkStoreWritable(dir); err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName: "baton",
		JetStream:  true,
		StoreDir:   dir,
		SyncAlways: cfg.SyncAlways,
		NoSigs:     true,
		DontListen: cfg.ListenAddr == "",
	}
	if cfg.ListenAddr != "" {
		host, port, err := net.SplitHostPort(cfg.ListenAddr)
		if err != nil {
			return nil, fmt.Errorf("queue: ListenAddr %q: %w", cfg.ListenAddr, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil || p < 0 || p > 65535 {
			return nil, fmt.Errorf("queue: ListenAddr %q: bad port", cfg.ListenAddr)
		}
		if p == 0 {
			p = server.RANDOM_PORT
		}
		opts.Host, opts.Port = host, p
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("queue: embedded server: %w", err)
	}
	sl := &serverLogger{log: log.With(zap.String(fieldSubsystem, "nats"))}
	srv.SetLoggerV2(sl, false, false, false)
	srv.Start()
	// nats-server's Start returns as soon as it logs a fatal error (a
	// store it cannot use): the server will never be ready, and waiting
	// for it would only delay the error by ConnectTimeout.
	if sl.failedFatally() || !srv.ReadyForConnections(cfg.ConnectTimeout) || !srv.JetStreamEnabled() {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("queue: embedded server did not start: %w", sl.fatal())
	}
	return srv, nil
}

// checkStoreWritable refuses a JetStream store this process cannot write
// (files restored as root into the directory of a baton that runs as its
// own user, say), naming what it cannot write: nats-server reports such a
// store as "storage directory is not a directory", or fails later.
func checkStoreWritable(dir string) error {
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			f, err := os.CreateTemp(path, ".baton-write-check-")
			if err != nil {
				return err
			}
			f.Close()
			return os.Remove(f.Name())
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		return f.Close()
	})
	if err != nil {
		return fmt.Errorf("queue: the embedded JetStream store %s cannot be written (%w): give its files to the user baton runs as", dir, err)
	}
	return nil
}

// serverLogger hands nats-server's log lines to zap. The server's notices
// (its start banner among them) go to debug; warnings and errors keep their
// level. A fatal line does not exit the process: it is kept and reported by
// startServer.
type serverLogger struct {
	log *zap.Logger

	mu       sync.Mutex
	lastFail string
	fatalErr bool // a fatal line was logged
}

func (l *serverLogger) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLogger) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l *serverLogger) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLogger) Tracef(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }

func (l *serverLogger) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.remember(msg)
	l.log.Error(msg)
}

func (l *serverLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.remember(msg)
	l.mu.Lock()
	l.fatalErr = true
	l.mu.Unlock()
	l.log.Error(msg, zap.Bool("fatal", true))
}

// failedFatally reports whether the server logged a fatal error.
func (l *serverLogger) failedFatally() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatalErr
}

func (l *serverLogger) remember(msg string) {
	l.mu.Lock()
	l.lastFail = msg
	l.mu.Unlock()
}

func (l *serverLogger) fatal() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lastFail == "" {
		return errors.New("not ready in time")
	}
	return errors.New(l.lastFail)
}
