package main

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
)

// writeRows writes a suite's rows into dir as NAME.json and, through
// table, as NAME.txt.
func writeRows(dir, name string, rows any, table func(io.Writer) error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), b, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, name+".txt"))
	if err != nil {
		return err
	}
	return errors.Join(table(f), f.Close())
}
