/**
 * A durable cell's state on its DOM node: `data-durable-state` and a small badge by the prompt.
 */
import { Cell } from '@jupyterlab/cells';

import { DisplayState, ICellState } from './types';

const BADGE = 'durable-nb-badge';

/** "14:03", or "3 Dec 14:03" for another day. */
export function when(epochSeconds: number | null): string {
  if (epochSeconds === null || !isFinite(epochSeconds)) {
    return '';
  }
  const at = new Date(epochSeconds * 1000);
  const time = at.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  if (at.toDateString() === new Date().toDateString()) {
    return time;
  }
  return `${at.toLocaleDateString([], { day: 'numeric', month: 'short' })} ${time}`;
}

/** "2.6 ms", "0.42 s", "3.1 s", "2 min 5 s". */
export function took(seconds: number | null): string {
  if (seconds === null || !isFinite(seconds)) {
    return '';
  }
  if (seconds < 0.1) {
    return `${(seconds * 1000).toFixed(1)} ms`;
  }
  if (seconds < 10) {
    return `${seconds.toFixed(seconds < 1 ? 2 : 1)} s`;
  }
  if (seconds < 120) {
    return `${Math.round(seconds)} s`;
  }
  return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
}

/** "512 B", "3.4 kB", "12 MB". */
export function size(bytes: number | null): string {
  if (bytes === null || !isFinite(bytes)) {
    return '';
  }
  const units = ['B', 'kB', 'MB', 'GB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit += 1;
  }
  return `${unit === 0 ? value : value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

/** The badge's text for a state. */
export function label(state: DisplayState, cell: ICellState): string {
  const parts = (...items: string[]) => items.filter(Boolean).join(' · ');
  switch (state) {
    case 'committed':
      return parts('committed', when(cell.at), took(cell.duration), cell.bytes === null ? '' : `${size(cell.bytes)} stored`);
    case 'restored':
      return parts('restored', cell.at === null ? '' : `from ${when(cell.at)}`, took(cell.duration));
    case 'running':
      return 'running…';
    case 'paused':
      return parts('paused at gate', cell.gate || '');
    case 'failed':
      return parts('failed', when(cell.at));
    case 'stale':
      return 'stale · edited since its commit: running it forks the run';
  }
}

/** Show a cell's state on its node (or remove it, with `state` null). */
export function showState(widget: Cell, state: DisplayState | null, cell: ICellState | null): void {
  const node = widget.node;
  // In the input's wrapper, at its bottom right: clear of the cell toolbar at the top.
  const host = (node.querySelector('.jp-Cell-inputWrapper') as HTMLElement | null) ?? node;
  let badge = node.querySelector(`.${BADGE}`) as HTMLElement | null;
  if (state === null || cell === null) {
    delete node.dataset.durableState;
    badge?.remove();
    return;
  }
  node.dataset.durableState = state;
  if (!badge) {
    badge = document.createElement('div');
    badge.className = BADGE;
    host.appendChild(badge);
  }
  badge.dataset.durableState = state;
  // textContent only: node names, gate reasons and run ids are data, never markup.
  badge.textContent = label(state, cell);
  badge.title = `durable cell '${cell.node}' in run ${cell.run_id}`;
}
