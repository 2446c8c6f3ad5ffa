module github.com/finedge/idempotent-consumer

go 1.26
