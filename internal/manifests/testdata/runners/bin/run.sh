#!/bin/sh
echo counted >&2
