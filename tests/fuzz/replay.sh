#!/bin/sh
# SPDX-License-Identifier: MIT
# make check: replay the seed corpus through the model-checking target.
exec ./tests/fuzz/fuzz_ops "$(dirname "$0")"/corpus/*
