// Package arch holds no code: its test enforces the direction of package
// dependencies written down in ARCHITECTURE.md.
package arch
