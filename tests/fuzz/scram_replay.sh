#!/bin/sh
# SPDX-License-Identifier: MIT
# make check: replay the SCRAM and auth-file seeds (tests/fuzz/scram_fuzz.c).
exec ./tests/fuzz/scram_fuzz "$(dirname "$0")"/scram-corpus/*
