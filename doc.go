// Package idempotentconsumer turns an at-least-once queue into exactly-once
// effects. See README.md; the code lives in the sub-packages.
package idempotentconsumer
