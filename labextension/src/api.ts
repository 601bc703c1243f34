/**
 * Requests to the durable_nb server extension, through Jupyter's own connection (token and XSRF).
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { IRunDetail } from './types';

/** An answer of the server extension that is not a success. */
export class DurableRequestError extends Error {
  constructor(
    readonly status: number,
    readonly kind: string,
    message: string
  ) {
    super(message);
  }
}

const settings = ServerConnection.makeSettings();

async function request<T>(path: string, query: { [key: string]: string }, init: RequestInit = {}): Promise<T> {
  const url = URLExt.join(settings.baseUrl, 'durable', 'api', path) + URLExt.objectToQueryString(query);
  const response = await ServerConnection.makeRequest(url, init, settings);
  let body: any = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok) {
    const message = (body && typeof body.message === 'string' && body.message) || `${response.status} ${response.statusText}`;
    const kind = (body && typeof body.error === 'string' && body.error) || 'HTTPError';
    throw new DurableRequestError(response.status, kind, message);
  }
  return body as T;
}

function runPath(runId: string, ...rest: string[]): string {
  return ['runs', encodeURIComponent(runId), ...rest.map(encodeURIComponent)].join('/');
}

/** The page showing the cells of a run and its forks side by side (it runs no script). */
export function compareCellsUrl(runId: string, store: string): string {
  return URLExt.join(settings.baseUrl, 'durable', 'compare', encodeURIComponent(runId)) + URLExt.objectToQueryString({ store });
}

/** The run, its checkpoints, fork tree, waiting gates and version. */
export function getRun(runId: string, store: string): Promise<IRunDetail> {
  return request<IRunDetail>(runPath(runId), { store });
}

/** The run's version: it changes whenever anything changes the run. */
export async function getVersion(runId: string, store: string): Promise<string> {
  const answer = await request<{ version: string }>(runPath(runId, 'version'), { store });
  return String(answer.version);
}

/** The run a kernel of this server attached to, as its registry entry says. */
export function getKernel(kernelId: string): Promise<{ run_id: string; store_key: string }> {
  return request(['kernels', encodeURIComponent(kernelId)].join('/'), {});
}

/** Approve or reject the gate a node waits at. */
export function decide(
  runId: string,
  store: string,
  node: string,
  approved: boolean,
  comment: string | null,
  checkpointId: string | null = null
): Promise<unknown> {
  // With the gate's checkpoint, a later gate of the same cell is never decided by a click on this one.
  const body = checkpointId ? { approved, comment, checkpoint_id: checkpointId } : { approved, comment };
  return request(runPath(runId, 'gates', node), { store }, {
    method: 'POST',
    body: JSON.stringify(body)
  });
}

/** Which of these cells' sources differ from the code committed for them. */
export async function staleCells(
  runId: string,
  store: string,
  cells: Array<{ cell_id: string; node: string; source: string }>
): Promise<string[]> {
  const answer = await request<{ stale: string[] }>(runPath(runId, 'stale'), { store }, {
    method: 'POST',
    body: JSON.stringify({ cells })
  });
  return Array.isArray(answer.stale) ? answer.stale.map(String) : [];
}
